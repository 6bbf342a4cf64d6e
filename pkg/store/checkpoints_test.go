package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// checkpointsOf returns a copy of the fake bucket.
func checkpointsOf(l *fakeLoader) map[string]Checkpoint {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.checkpoints)
}

// compactEach applies rounds of a message and a compaction to each
// session and returns the checkpoint each session's last compaction asks
// for.
func compactEach(s *Store, l *fakeLoader, sessions []string, rounds int) map[string]Checkpoint {
	want := map[string]Checkpoint{}
	for i := range rounds {
		for _, id := range sessions {
			ingest(s, l, id, userRecord(fmt.Sprintf("%s %d", id, i)))
			seq := ingest(s, l, id, compactionRecord(fmt.Sprintf("%s kept %d", id, i)))
			// The ingest meets every record of the session from the
			// compaction on: the checkpoint lists them.
			want[id] = Checkpoint{From: seq, Seq: seq}.WithSeqs([]uint64{seq})
		}
	}
	return want
}

func TestStore_CheckpointsBehindTheIngest(t *testing.T) {
	sessions := []string{"a", "b", "c"}

	t.Run("a save that blocks holds up no Apply; the latest is written", func(t *testing.T) {
		l := newFakeLoader()
		release := make(chan struct{})
		releaseOnce := sync.OnceFunc(func() { close(release) })
		t.Cleanup(releaseOnce)
		var saves atomic.Int64
		fl := &funcLoader{fakeLoader: l, save: func(ctx context.Context, session string, cp Checkpoint) error {
			saves.Add(1)
			if err := blockUntil(ctx, release); err != nil {
				return err
			}
			return l.SaveCheckpoint(ctx, session, cp)
		}}
		s := newStore(t)
		s.Loader = fl
		t.Cleanup(func() { s.Close() })

		const rounds = 10
		applied := make(chan struct{})
		var want map[string]Checkpoint
		go func() {
			defer close(applied)
			want = compactEach(s, l, sessions, rounds)
		}()
		require.Eventually(t, isClosed(applied), 10*time.Second, time.Millisecond, "Apply waited for a checkpoint save")
		require.Equal(t, l.lastSeq(), s.Applied())
		require.Eventually(t, func() bool { return saves.Load() > 0 }, 10*time.Second, time.Millisecond, "the writer is in a save")
		require.Equal(t, int64(1), saves.Load(), "the writer waits for the save in hand")
		for _, id := range sessions {
			sl := s.slot(id, false)
			sl.mu.Lock()
			saved := sl.saved
			sl.mu.Unlock()
			require.Zero(t, saved, "%s: nothing counted as written while the save blocks", id)
		}

		releaseOnce()
		require.Eventually(t, func() bool { return maps.Equal(want, checkpointsOf(l)) }, 10*time.Second, time.Millisecond,
			"each session's latest checkpoint is written")
		require.NoError(t, s.SaveCheckpoints(context.Background()))
		require.Less(t, saves.Load(), int64(rounds*len(sessions)/2),
			"checkpoints waiting to be written are replaced by their session's next")
	})

	t.Run("written in batches", func(t *testing.T) {
		l := newFakeLoader()
		release := make(chan struct{})
		releaseOnce := sync.OnceFunc(func() { close(release) })
		t.Cleanup(releaseOnce)
		var mu sync.Mutex
		var batches []int
		bl := &batchLoader{
			funcLoader: &funcLoader{fakeLoader: l, save: func(context.Context, string, Checkpoint) error {
				return errors.New("saved one at a time")
			}},
			saveAll: func(ctx context.Context, cps iter.Seq2[string, Checkpoint]) error {
				if err := blockUntil(ctx, release); err != nil {
					return err
				}
				n := 0
				for id, cp := range cps {
					if err := l.SaveCheckpoint(ctx, id, cp); err != nil {
						return err
					}
					n++
				}
				mu.Lock()
				batches = append(batches, n)
				mu.Unlock()
				return nil
			},
		}
		s := newStore(t)
		s.Loader = bl
		t.Cleanup(func() { s.Close() })

		many := make([]string, 100)
		for i := range many {
			many[i] = fmt.Sprintf("s%d", i)
		}
		want := compactEach(s, l, many, 2)
		releaseOnce()
		require.NoError(t, s.SaveCheckpoints(context.Background()))
		require.Equal(t, want, checkpointsOf(l))
		mu.Lock()
		defer mu.Unlock()
		require.LessOrEqual(t, len(batches), 4, "batches %v", batches)
	})

	t.Run("a failed save is retried", func(t *testing.T) {
		l := newFakeLoader()
		var failures atomic.Int64
		fl := &funcLoader{fakeLoader: l, save: func(ctx context.Context, session string, cp Checkpoint) error {
			if failures.Add(1) <= 3 {
				return errors.New("kv: no responders")
			}
			return l.SaveCheckpoint(ctx, session, cp)
		}}
		s := newStore(t)
		s.Loader = fl
		t.Cleanup(func() { s.Close() })
		want := compactEach(s, l, sessions, 1)
		require.Eventually(t, func() bool { return maps.Equal(want, checkpointsOf(l)) }, 20*time.Second, time.Millisecond)
	})

	t.Run("SaveCheckpoints gives up at its deadline; Close ends a blocked save", func(t *testing.T) {
		l := newFakeLoader()
		entered := make(chan struct{}, 1)
		fl := &funcLoader{fakeLoader: l, save: func(ctx context.Context, session string, cp Checkpoint) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		}}
		s := newStore(t)
		s.Loader = fl
		compactEach(s, l, sessions, 1)
		<-entered
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, s.SaveCheckpoints(ctx), context.DeadlineExceeded)

		closed := make(chan struct{})
		go func() {
			defer close(closed)
			s.Close()
		}()
		require.Eventually(t, isClosed(closed), 10*time.Second, time.Millisecond, "Close waited for a blocked save")
		require.Error(t, s.SaveCheckpoints(context.Background()), "nothing is written after Close")
	})
}

// A checkpoint that is old, or missing, only makes a load read more: the
// load finds the latest compaction again, by scanning the subject, and
// the next load starts from there, by sequence when it can.
func TestStore_OldCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name string
		have func(c1 uint64) (Checkpoint, bool) // what the bucket holds
	}{
		{"an old checkpoint", func(c1 uint64) (Checkpoint, bool) { return Checkpoint{From: c1, Seq: c1}, true }},
		{"no checkpoint", func(uint64) (Checkpoint, bool) { return Checkpoint{}, false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeLoader()
			s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: true})
			ingest(s, l, "a", userRecord("one"))
			c1 := ingest(s, l, "a", compactionRecord("first"))
			ingest(s, l, "a", userRecord("two"))
			c2 := ingest(s, l, "a", compactionRecord("second"))
			last := ingest(s, l, "a", userRecord("three"))
			require.NoError(t, s.Close()) // a crash: the latest checkpoint may be lost
			l.mu.Lock()
			delete(l.checkpoints, "a")
			if cp, ok := tc.have(c1); ok {
				l.checkpoints["a"] = cp
			}
			l.mu.Unlock()

			fresh := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: true})
			t.Cleanup(func() { fresh.Close() })
			fresh.Advance(l.lastSeq())
			requireView(t, fresh, l, "a")
			reads := l.readsOf("a")
			start, _ := tc.have(c1)
			require.Equal(t, readRange{"a", start.From, last}, reads[len(reads)-1], "read from the checkpoint")

			fresh.Evict("a")
			seqReads := l.seqReads
			requireView(t, fresh, l, "a")
			require.Len(t, l.readsOf("a"), len(reads), "loaded again by sequence, not by scanning")
			require.Equal(t, seqReads+1, l.seqReads)
			require.NoError(t, fresh.SaveCheckpoints(context.Background()))
			require.Equal(t, Checkpoint{From: c2, Seq: last}.WithSeqs([]uint64{c2, last}), checkpointsOf(l)["a"], "the latest compaction is found again, with its records")
		})
	}
}

// A checkpoint past the watermark (ctxd rebuild writes them as of the
// stream's end, and the service may be behind) is not used: a load reads
// the session up to the watermark, and the ingest goes on from there.
func TestStore_CheckpointAheadOfTheWatermark(t *testing.T) {
	for _, bySeq := range []bool{false, true} {
		t.Run(fmt.Sprintf("bySeq %v", bySeq), func(t *testing.T) {
			l := newFakeLoader()
			l.publish("s", userRecord("one"))
			w := l.publish("s", userRecord("two"))
			c := l.publish("s", compactionRecord("kept"))
			after := l.publish("s", userRecord("three"))
			l.checkpoints["s"] = Checkpoint{From: c, Seq: after} // by a rebuild, at the stream's end
			s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: bySeq})
			t.Cleanup(func() { s.Close() })
			s.Advance(w) // the service has applied up to w

			js, seq, isNil := viewJSON(t, s, "s")
			require.False(t, isNil, "the session has records up to the watermark")
			require.Equal(t, w, seq)
			requireCovers(t, l, "s", js, seq, w, s.MaxSessionBytes)

			// The ingest catches up.
			for _, r := range l.stream("s")[2:] {
				s.Apply("s", r.seq, r.data)
			}
			requireView(t, s, l, "s")
			s.Evict("s")
			requireView(t, s, l, "s")
		})
	}
}

// A load that finds a later compaction than the checkpoint it read (or
// than none) has the session's checkpoint written from there: the next
// start loads from it, and the session may be forgotten once it is
// written.
func TestStore_LoadWritesTheCompactionItFinds(t *testing.T) {
	for _, tc := range []struct {
		name string
		cp   bool
	}{{"an old checkpoint", true}, {"no checkpoint", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeLoader()
			l.publish("a", userRecord("one"))
			c1 := l.publish("a", compactionRecord("first"))
			l.publish("a", userRecord("two"))
			c2 := l.publish("a", compactionRecord("second"))
			last := l.publish("a", userRecord("three"))
			if tc.cp {
				l.checkpoints["a"] = Checkpoint{From: c1, Seq: c1}
			}
			s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes})
			t.Cleanup(func() { s.Close() })
			s.Advance(last)
			requireView(t, s, l, "a")
			require.NoError(t, s.checkpoints.flush(context.Background()))
			require.Equal(t, Checkpoint{From: c2, Seq: last}.WithSeqs([]uint64{c2, last}), checkpointsOf(l)["a"])

			s.Evict("a")
			sl := s.slot("a", false)
			sl.mu.Lock()
			defer sl.mu.Unlock()
			require.True(t, s.forgettable(sl), "its checkpoint is written")
		})
	}
}

// CloseCheckpoints is a shutdown's write: the sessions whose checkpoint
// changed since it was written, in bulk, within the context, counted.
func TestStore_CloseCheckpoints(t *testing.T) {
	const n = 3 * writeChunk // several chunks
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}

	t.Run("only what changed is written, and counted", func(t *testing.T) {
		l := newFakeLoader()
		var mu sync.Mutex
		var counting bool
		rewritten := map[string]bool{} // the sessions written once counting
		saves := 0                     // the writes once counting, each
		bl := &batchLoader{funcLoader: &funcLoader{fakeLoader: l}, saveAll: func(ctx context.Context, cps iter.Seq2[string, Checkpoint]) error {
			for id, cp := range cps {
				if err := l.SaveCheckpoint(ctx, id, cp); err != nil {
					return err
				}
				mu.Lock()
				if counting {
					rewritten[id] = true
					saves++
				}
				mu.Unlock()
			}
			return nil
		}}
		s := newStore(t)
		s.Loader = bl
		t.Cleanup(func() { s.Close() })
		for _, id := range ids {
			ingest(s, l, id, compactionRecord(id))
		}
		require.NoError(t, s.SaveCheckpoints(context.Background()))
		mu.Lock()
		counting = true
		mu.Unlock()
		for _, id := range ids[:3] {
			ingest(s, l, id, userRecord("after"))
		}

		// The writer behind the ingest may write some of the three
		// first, or while the close runs (a session whose write is in
		// flight is written again): the close writes what it has not,
		// and counts every write made while it ran.
		written, left, err := s.CloseCheckpoints(context.Background())
		require.NoError(t, err)
		require.Zero(t, left)
		mu.Lock()
		require.Equal(t, map[string]bool{ids[0]: true, ids[1]: true, ids[2]: true}, rewritten,
			"the sessions unchanged since their checkpoint was written are not written again")
		require.LessOrEqual(t, written, saves, "the count is of writes made")
		mu.Unlock()
		for _, id := range ids[:3] {
			require.Equal(t, l.lastSeq(), max(l.lastSeq(), checkpointsOf(l)[id].Seq))
			require.Equal(t, s.slot(id, false).seq, checkpointsOf(l)[id].Seq)
		}
		_, _, err = s.CloseCheckpoints(context.Background())
		require.NoError(t, err, "a second close writes nothing")
	})

	t.Run("past the deadline, what is left is counted and dropped in silence", func(t *testing.T) {
		l := newFakeLoader()
		var logs bytes.Buffer
		var chunks atomic.Int64
		ctx, shutdown := context.WithCancel(context.Background())
		defer shutdown()
		bl := &batchLoader{funcLoader: &funcLoader{fakeLoader: l}, saveAll: func(ctx context.Context, cps iter.Seq2[string, Checkpoint]) error {
			if chunks.Add(1) > 1 {
				// The bucket stops answering after one chunk, until the
				// shutdown's time is up.
				shutdown()
				<-ctx.Done()
				return fmt.Errorf("checkpoint x: %w", ctx.Err())
			}
			for id, cp := range cps {
				if err := l.SaveCheckpoint(ctx, id, cp); err != nil {
					return err
				}
			}
			return nil
		}}
		s := newStore(t)
		s.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		for _, id := range ids { // no Loader yet: nothing is written behind the ingest
			ingest(s, l, id, compactionRecord(id))
		}
		s.Loader = bl

		written, left, err := s.CloseCheckpoints(ctx)
		require.Error(t, err)
		require.Equal(t, writeChunk, written, "one chunk written")
		require.Equal(t, n-writeChunk, left, "the others counted as not written")
		require.Len(t, checkpointsOf(l), writeChunk)
		require.NoError(t, s.Close())
		require.Empty(t, logs.String(), "the store logs nothing: the caller says it in one line")
	})
}
