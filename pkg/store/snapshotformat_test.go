package store

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

var updateFormats = flag.Bool("update", false, "write testdata/snapshot-v1.bin again from the current code")

// formatFixture is the stream a stored snapshot in testdata was written
// of: two sessions interleaved, a compaction in a, a tool call and its
// result in b.
// With s, the store applies every record as it is stored.
func formatFixture(l *fakeLoader, s *Store) {
	pub := func(id string, data []byte) {
		seq := l.publish(id, data)
		if s != nil {
			s.Apply(id, seq, data)
		}
	}
	for i := range 12 {
		pub("a", userRecord(fmt.Sprintf("a %d", i)))
		pub("b", userRecord(fmt.Sprintf("b %d", i)))
		if i == 5 {
			pub("a", compactionRecord("kept"))
		}
	}
	pub("b", []byte(`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{"cmd":"ls","n":1.5}}]}`))
	pub("b", []byte(`{"role":"toolResult","toolCallId":"c1","toolName":"bash","content":[{"type":"text","text":"ok"}]}`))
}

// A snapshot as stored by an earlier version of this code (format version
// 1, in testdata) still decodes and is used: the session it is of loads
// from it, and its view is Build of the session's records.
func TestStore_StoredSnapshotFormat(t *testing.T) {
	path := filepath.Join("testdata", "snapshot-v1.bin")
	l := newFakeLoader()
	sl := newSnapLoader(l)
	if !*updateFormats {
		formatFixture(l, nil)
	} else {
		s := snapStore(t, sl)
		s.Fresh = true
		formatFixture(l, s)
		s.Advance(l.lastSeq())
		requireView(t, s, l, "b")
		_, _, err := s.CloseSnapshots(context.Background(), sl.identity, sl.removed)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, sl.snaps["b"], 0o644))
	}
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	sn, err := decodeSnapshot(data)
	require.NoError(t, err)
	require.Equal(t, sl.identity, sn.stream)
	require.Equal(t, l.lastSeq(), sn.seq)

	sl.snaps["b"] = data
	fresh := snapStore(t, sl)
	fresh.Advance(l.lastSeq())
	requireView(t, fresh, l, "b")
	require.Equal(t, uint64(1), fresh.Stats().SnapshotLoads, "loaded from the stored snapshot")
}
