package store

import (
	"fmt"
	"testing"
)

// A checkpoint is a hint: one whose From is not a valid compaction of the
// session (tampered, or written by mistake: the record after the
// compaction, a plain message, another session's compaction, a sequence
// the session has no record at) is not trusted, and the session loads
// from its subject's start. Each view equals Build of the session's
// records.
func TestStore_CheckpointFromNotACompaction(t *testing.T) {
	for _, bySeq := range []bool{false, true} {
		l := newFakeLoader()
		l.publish("s", userRecord("one"))
		c := l.publish("s", compactionRecord("kept"))
		after := l.publish("s", userRecord("two"))
		other := l.publish("o", compactionRecord("other's"))
		l.publish("s", userRecord("three"))
		last := l.publish("s", userRecord("four"))
		for name, from := range map[string]uint64{
			"the record after the compaction": after,
			"a plain message":                 last,
			"another session's compaction":    other,
			"the first record":                c - 1,
		} {
			t.Run(fmt.Sprintf("%s, bySeq %v", name, bySeq), func(t *testing.T) {
				l.checkpoints["s"] = Checkpoint{From: from, Seq: last}
				s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: bySeq})
				t.Cleanup(func() { s.Close() })
				s.Advance(last)
				requireView(t, s, l, "s")
			})
		}
	}
}
