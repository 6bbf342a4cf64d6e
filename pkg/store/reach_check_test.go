package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
)

// readerStore is a store that no ingest feeds, as an instance that
// does not hold the ingest has: requests bring it up to a session's
// last record (ViewAtChecked).
func readerStore(t *testing.T, l *fakeLoader, maxSessions int) *Store {
	s := newLazyStore(t, l, lazyConfig{maxSessions: maxSessions, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes})
	s.Advance(l.lastSeq())
	t.Cleanup(func() { s.Close() })
	return s
}

// viewAt shows a session at its last record in the fake stream, with
// check, and returns its JSON.
func viewAt(t *testing.T, s *Store, l *fakeLoader, session string, check func(context.Context, bool) error) string {
	t.Helper()
	recs := l.stream(session)
	last := recs[len(recs)-1].seq
	var got string
	require.NoError(t, s.ViewAtChecked(context.Background(), session, last, check, func(p *projection.Session) {
		got = string(p.AppendJSON(nil))
	}))
	return got
}

// wantOf is Build over what the fake stream holds of a session.
func wantOf(t *testing.T, s *Store, l *fakeLoader, session string) string {
	t.Helper()
	want, _ := modelOf(l.stream(session), s.MaxSessionBytes).want(t)
	return want
}

// forgetOnRead is a check that counts the views resting on a read, and
// applies a removal of the session (Forget) then: its advisory, come
// while the check waits for it, or a count of the stream's removed
// sequences that moved.
func forgetOnRead(checks *int, s *Store, session string) func(context.Context, bool) error {
	return func(_ context.Context, read bool) error {
		if read {
			*checks++
			s.Forget(session)
		}
		return nil
	}
}

// A removal of records the store holds, told to it by nobody before a
// request reads the records after them, is found by the check that
// ViewAtChecked calls after the read: the check applies it (Forget, as
// the advisory of the removal or a count of the stream's removed
// sequences does), and the view shows what the stream holds, not the
// records held beside those read.
func TestStore_ViewAtChecked(t *testing.T) {
	t.Run("checks after a read only", func(t *testing.T) {
		l := newFakeLoader()
		s := readerStore(t, l, 100)
		checks := 0
		check := func(_ context.Context, read bool) error {
			if read {
				checks++
			}
			return nil
		}
		for i := range 3 {
			l.publish("a", userRecord(fmt.Sprintf("a%d", i)))
		}
		require.Equal(t, wantOf(t, s, l, "a"), viewAt(t, s, l, "a", check))
		require.Zero(t, checks, "a session never met loads from the stream and its checkpoint, which the load checks")
		viewAt(t, s, l, "a", check)
		require.Zero(t, checks, "a session viewed again with nothing new costs no check")
		l.publish("a", userRecord("a3"))
		require.Equal(t, wantOf(t, s, l, "a"), viewAt(t, s, l, "a", check))
		require.Equal(t, 1, checks, "a session caught up is checked after the read")
		viewAt(t, s, l, "a", check)
		require.Equal(t, 1, checks)
	})
	for _, told := range []bool{false, true} {
		t.Run(fmt.Sprintf("caught up/told=%v", told), func(t *testing.T) {
			l := newFakeLoader()
			s := readerStore(t, l, 100)
			var recs []uint64
			for i := range 5 {
				recs = append(recs, l.publish("a", userRecord(fmt.Sprintf("a%d", i))))
			}
			viewAt(t, s, l, "a", nil) // cached up to a4
			for i := 5; i < 8; i++ {
				recs = append(recs, l.publish("a", userRecord(fmt.Sprintf("a%d", i))))
			}
			l.remove("a", func(seq uint64) bool { return seq < recs[7] })
			checks := 0
			check := func(_ context.Context, read bool) error {
				if !read {
					return nil
				}
				checks++
				if told {
					s.Forget("a") // the removal's advisory, come while the check waits for it
				}
				return nil
			}
			got := viewAt(t, s, l, "a", check)
			require.Equal(t, 1, checks)
			if told {
				require.Equal(t, wantOf(t, s, l, "a"), got)
			} else {
				// What a check that finds nothing leaves: the store cannot
				// see a removal by itself.
				require.NotEqual(t, wantOf(t, s, l, "a"), got, "the cached records beside those read")
			}
		})
	}
	t.Run("load from a remembered compaction", func(t *testing.T) {
		l := newFakeLoader()
		s := readerStore(t, l, 1)
		l.publish("a", userRecord("a0"))
		compaction := l.publish("a", compactionRecord("kept"))
		l.publish("a", userRecord("a1"))
		viewAt(t, s, l, "a", nil) // loaded from its compaction
		l.publish("b", userRecord("b0"))
		viewAt(t, s, l, "b", nil) // a is evicted, and remembers its compaction
		l.remove("a", func(seq uint64) bool { return seq == compaction })
		checks := 0
		got := viewAt(t, s, l, "a", forgetOnRead(&checks, s, "a"))
		require.Equal(t, 1, checks, "checked before the load")
		require.Equal(t, wantOf(t, s, l, "a"), got)
	})
	t.Run("a record seen is gone", func(t *testing.T) {
		l := newFakeLoader()
		s := readerStore(t, l, 100)
		var recs []uint64
		for i := range 3 {
			recs = append(recs, l.publish("a", userRecord(fmt.Sprintf("a%d", i))))
		}
		viewAt(t, s, l, "a", nil)
		l.remove("a", func(seq uint64) bool { return seq == recs[2] })
		checks := 0
		got := viewAt(t, s, l, "a", forgetOnRead(&checks, s, "a"))
		require.Equal(t, 1, checks, "the session's last record is below one it has seen: checked")
		require.Equal(t, wantOf(t, s, l, "a"), got)
	})
	t.Run("check fails", func(t *testing.T) {
		l := newFakeLoader()
		s := readerStore(t, l, 100)
		l.publish("a", userRecord("a0"))
		viewAt(t, s, l, "a", nil)
		last := l.publish("a", userRecord("a1"))
		errCheck := fmt.Errorf("no stream state")
		err := s.ViewAtChecked(context.Background(), "a", last, func(context.Context, bool) error { return errCheck }, func(*projection.Session) {
			t.Fatal("shown after a check failed")
		})
		require.ErrorIs(t, err, errCheck)
	})
	t.Run("the record asked for is gone", func(t *testing.T) {
		l := newFakeLoader()
		s := readerStore(t, l, 100)
		l.publish("a", userRecord("a0"))
		viewAt(t, s, l, "a", nil)
		last := l.publish("a", userRecord("a1"))
		l.remove("a", func(seq uint64) bool { return seq == last })
		err := s.ViewAtChecked(context.Background(), "a", last, forgetOnRead(new(int), s, "a"), func(*projection.Session) {
			t.Fatal("shown without the record asked for")
		})
		require.ErrorIs(t, err, ErrBehind, "the caller asks the stream again where the session ends")
	})
}
