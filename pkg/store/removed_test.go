package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// remove deletes records from the fake stream, as a purge does.
func (l *fakeLoader) remove(session string, drop func(seq uint64) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.streams[session] = slices.DeleteFunc(l.streams[session], func(r stored) bool { return drop(r.seq) })
}

// A session whose records were removed from the stream, then forgotten,
// shows exactly what the stream holds, with the records that came after
// and none removed: whether it was loaded, indexed (a store fresh at the
// stream's start, loading by sequence) or neither, and whatever the
// removal took (its latest compaction, its last record, all of it).
func TestStore_ForgetRemovedRecords(t *testing.T) {
	cfg := lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: true}
	removals := map[string]func(recs []uint64) func(uint64) bool{
		"compaction": func(recs []uint64) func(uint64) bool { return func(seq uint64) bool { return seq == recs[2] } },
		"last": func(recs []uint64) func(uint64) bool {
			return func(seq uint64) bool { return seq == recs[len(recs)-1] }
		},
		"before": func(recs []uint64) func(uint64) bool { return func(seq uint64) bool { return seq < recs[4] } },
		"all":    func([]uint64) func(uint64) bool { return func(uint64) bool { return true } },
	}
	for name, removal := range removals {
		for _, loaded := range []bool{true, false} {
			for _, how := range []string{"session", "all", "holding"} {
				t.Run(fmt.Sprintf("%s/loaded=%v/%s", name, loaded, how), func(t *testing.T) {
					l := newFakeLoader()
					s := newFreshStore(t, l, cfg, true)
					t.Cleanup(func() { s.Close() })
					var recs []uint64
					for i := range 6 {
						data := userRecord(fmt.Sprintf("a%d", i))
						if i == 2 {
							data = compactionRecord("kept")
						}
						recs = append(recs, ingest(s, l, "a", data))
						ingest(s, l, "b", userRecord(fmt.Sprintf("b%d", i)))
					}
					if loaded {
						requireView(t, s, l, "a")
					}
					drop := removal(recs)
					l.remove("a", drop)
					switch how {
					case "session":
						s.Forget("a")
					case "all":
						s.ForgetAll()
					case "holding":
						first := recs[len(recs)-1]
						for _, seq := range recs {
							if drop(seq) {
								first = min(first, seq)
							}
						}
						s.ForgetHolding(first)
					}
					requireView(t, s, l, "a")
					ingest(s, l, "a", userRecord("after"))
					requireView(t, s, l, "a")
					requireView(t, s, l, "b")
					requireCacheConsistent(t, s)
				})
			}
		}
	}
}

// A session forgotten while it loads reads again: what the first read
// found holds records that are gone.
func TestStore_ForgetWhileLoading(t *testing.T) {
	l := newFakeLoader()
	reading, release := make(chan struct{}), make(chan struct{})
	first := true
	fl := &funcLoader{fakeLoader: l, records: func(ctx context.Context, session string, from, to uint64, fn func(seq uint64, data []byte) error) error {
		if first {
			first = false
			recs := l.stream(session)
			close(reading)
			if err := blockUntil(ctx, release); err != nil {
				return err
			}
			for _, r := range recs { // what the stream held when the read began
				if err := fn(r.seq, r.data); err != nil {
					return err
				}
			}
			return nil
		}
		return l.Records(ctx, session, from, to, fn)
	}}
	s := newStore(t)
	s.Loader = fl
	t.Cleanup(func() { s.Close() })
	var recs []uint64
	for i := range 4 {
		recs = append(recs, ingest(s, l, "a", userRecord(fmt.Sprintf("a%d", i))))
	}
	done := make(chan struct{})
	var got string
	go func() {
		defer close(done)
		got, _, _ = viewJSON(t, s, "a")
	}()
	<-reading
	l.remove("a", func(seq uint64) bool { return seq <= recs[1] })
	s.Forget("a")
	ingest(s, l, "a", userRecord("after"))
	close(release)
	require.Eventually(t, isClosed(done), 10*time.Second, time.Millisecond)
	want, _ := modelOf(l.stream("a"), s.MaxSessionBytes).want(t)
	require.Equal(t, want, got, "the view the load ended with")
	requireView(t, s, l, "a")
}

// A session evicted from an ingest's store remembers its latest
// compaction and loads from it again. When that compaction has left the
// stream and nobody told the store (its advisory late or denied, no
// record stored after it), the load does not find it where it starts:
// it reads the session's subject from its start instead, and shows what
// the stream holds, not the records after a compaction that is gone.
func TestStore_LoadFromRemovedCompaction(t *testing.T) {
	for _, bySeq := range []bool{false, true} {
		t.Run(fmt.Sprintf("bySeq=%v", bySeq), func(t *testing.T) {
			l := newFakeLoader()
			s := newFreshStore(t, l, lazyConfig{maxSessions: 1, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: bySeq}, true)
			t.Cleanup(func() { s.Close() })
			ingest(s, l, "a", userRecord("before"))
			compaction := ingest(s, l, "a", compactionRecord("kept"))
			ingest(s, l, "a", userRecord("after"))
			requireView(t, s, l, "a")
			ingest(s, l, "b", userRecord("b"))
			requireView(t, s, l, "b") // a is evicted, and remembers its compaction
			l.remove("a", func(seq uint64) bool { return seq == compaction })
			requireView(t, s, l, "a")
		})
	}
}
