package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
)

// followerStore is a store fed every record as it is stored, from the
// stream's end on, as a follower's is.
func followerStore(t *testing.T, l *fakeLoader) *Store {
	s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes})
	s.Advance(l.lastSeq())
	t.Cleanup(func() { s.Close() })
	return s
}

// publishApplied publishes a record to the fake stream and applies it,
// as the follower does.
func publishApplied(s *Store, l *fakeLoader, session, text string) uint64 {
	data := userRecord(text)
	seq := l.publish(session, data)
	s.Apply(session, seq, data)
	return seq
}

// viewSettled shows a session with settle and returns its JSON.
func viewSettled(t *testing.T, s *Store, session string, settle func(context.Context, uint64) (uint64, error)) string {
	t.Helper()
	got := "null"
	require.NoError(t, s.ViewSettled(context.Background(), session, settle, func(p *projection.Session) {
		if p != nil {
			got = string(p.AppendJSON(nil))
		}
	}))
	return got
}

// A state of a session no view showed before is shown only after settle
// proved the removals up to its last record; one shown before costs no
// settle; a removal that settle applies (Forget) is never shown beside
// the records stored after it.
func TestStore_ViewSettled(t *testing.T) {
	t.Run("settles what is new only", func(t *testing.T) {
		l := newFakeLoader()
		s := followerStore(t, l)
		settles := 0
		settle := func(context.Context, uint64) (uint64, error) { settles++; return s.Applied(), nil }
		publishApplied(s, l, "a", "a0")
		require.Equal(t, wantOf(t, s, l, "a"), viewSettled(t, s, "a", settle))
		require.Equal(t, 1, settles)
		require.True(t, s.Shown("a"))
		viewSettled(t, s, "a", settle)
		require.Equal(t, 1, settles, "shown again as it was")
		publishApplied(s, l, "a", "a1")
		require.False(t, s.Shown("a"))
		require.Equal(t, wantOf(t, s, l, "a"), viewSettled(t, s, "a", settle))
		require.Equal(t, 2, settles)
		require.Equal(t, "null", viewSettled(t, s, "none", settle), "a session without records")
	})
	t.Run("a removal not told", func(t *testing.T) {
		l := newFakeLoader()
		s := followerStore(t, l)
		var recs []uint64
		for i := range 4 {
			recs = append(recs, publishApplied(s, l, "a", fmt.Sprintf("a%d", i)))
		}
		viewSettled(t, s, "a", func(context.Context, uint64) (uint64, error) { return s.Applied(), nil })
		// Removed, and a record stored after: applied unproven beside
		// what was removed.
		l.remove("a", func(seq uint64) bool { return seq < recs[3] })
		publishApplied(s, l, "a", "a4")
		got := viewSettled(t, s, "a", func(context.Context, uint64) (uint64, error) {
			s.Forget("a") // what the proof finds, and applies
			return s.Applied(), nil
		})
		require.Equal(t, wantOf(t, s, l, "a"), got)
	})
	t.Run("a record applied during the proof", func(t *testing.T) {
		l := newFakeLoader()
		s := followerStore(t, l)
		publishApplied(s, l, "a", "a0")
		var proven []uint64
		got := viewSettled(t, s, "a", func(context.Context, uint64) (uint64, error) {
			upTo := s.Applied()
			proven = append(proven, upTo)
			if len(proven) == 1 {
				publishApplied(s, l, "a", "a1") // past what this proof covers
			}
			return upTo, nil
		})
		require.Len(t, proven, 2, "proven again for the record past the first proof")
		require.Equal(t, wantOf(t, s, l, "a"), got)
	})
	t.Run("records faster than the proofs", func(t *testing.T) {
		l := newFakeLoader()
		s := followerStore(t, l)
		publishApplied(s, l, "a", "a0")
		err := s.ViewSettled(context.Background(), "a", func(context.Context, uint64) (uint64, error) {
			upTo := s.Applied()
			publishApplied(s, l, "a", "more")
			return upTo, nil
		}, func(*projection.Session) { t.Fatal("shown unproven") })
		require.ErrorContains(t, err, "proofs of the removals")
	})
	t.Run("a load read past what the store applied", func(t *testing.T) {
		// After a removal a load reads to the stream's end, past the
		// records the store applied: settle is told the session's last
		// record the view found, and a proof that reaches it shows it.
		l := newFakeLoader()
		s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: true})
		t.Cleanup(func() { s.Close() })
		publishApplied(s, l, "a", "a0")
		l.remove("a", func(uint64) bool { return true })
		s.Forget("a")
		l.publish("a", userRecord("a1")) // stored, not applied yet
		var told []uint64
		got := viewSettled(t, s, "a", func(_ context.Context, seen uint64) (uint64, error) {
			told = append(told, seen)
			return max(s.Applied(), seen), nil
		})
		require.Equal(t, []uint64{l.lastSeq()}, told, "settle told the record the load read")
		require.Equal(t, wantOf(t, s, l, "a"), got)
	})
	t.Run("an error of settle fails the view", func(t *testing.T) {
		l := newFakeLoader()
		s := followerStore(t, l)
		publishApplied(s, l, "a", "a0")
		err := s.ViewSettled(context.Background(), "a", func(ctx context.Context, _ uint64) (uint64, error) {
			return 0, context.DeadlineExceeded
		}, func(*projection.Session) { t.Fatal("shown unproven") })
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}
