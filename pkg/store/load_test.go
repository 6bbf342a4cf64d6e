package store

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// A load whose reads get no answer holds up neither the ingest of other
// sessions nor that of its own: records applied meanwhile are in the
// view the load ends with.
func TestStore_LoadDoesNotHoldUpTheIngest(t *testing.T) {
	l := newFakeLoader()
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	fl := &funcLoader{fakeLoader: l, records: func(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
		if session == "slow" {
			select {
			case entered <- struct{}{}:
			default:
			}
			if err := blockUntil(ctx, release); err != nil {
				return err
			}
		}
		return l.Records(ctx, session, from, to, fn)
	}}
	s := newStore(t)
	s.Loader = fl
	s.LoadTimeout = long
	t.Cleanup(func() { s.Close() })

	ingest(s, l, "slow", userRecord("one"))
	ingest(s, l, "other", userRecord("other one"))
	ingest(s, l, "slow", userRecord("two"))

	viewed := make(chan error, 1)
	var got string
	go func() {
		viewed <- s.View(context.Background(), "slow", func(p *projection.Session) { got = string(p.AppendJSON(nil)) })
	}()
	select {
	case <-entered:
	case <-time.After(long):
		t.Fatal("the load never read the stream")
	}

	// While the load waits for its records, the ingest goes on, for the
	// loading session too: a compaction, an undecodable record, messages.
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		ingest(s, l, "slow", userRecord("three, while loading"))
		ingest(s, l, "other", userRecord("other two"))
		ingest(s, l, "slow", compactionRecord("kept while loading"))
		ingest(s, l, "slow", []byte("{broken"))
		ingest(s, l, "slow", userRecord("four, while loading"))
		ingest(s, l, "new", userRecord("a session met while loading"))
	}()
	require.Eventually(t, isClosed(applied), 10*time.Second, time.Millisecond, "Apply waited for a load")
	require.Equal(t, l.lastSeq(), s.Applied(), "the watermark moves on")
	require.NoError(t, s.Wait(context.Background(), l.lastSeq(), 0))
	requireView(t, s, l, "other")
	requireView(t, s, l, "new")
	select {
	case err := <-viewed:
		t.Fatalf("View returned %v before its load could read", err)
	default:
	}

	releaseOnce()
	require.NoError(t, <-viewed)
	want, _ := modelOf(l.stream("slow"), s.MaxSessionBytes).want(t)
	require.Equal(t, want, got, "the load applies what arrived meanwhile")
	require.Contains(t, got, "four, while loading")
	requireView(t, s, l, "slow")
	requireCacheConsistent(t, s)
	require.Equal(t, []uint64{7}, rejectedSeqs(s), "the undecodable record is listed once")
}

// A load whose reads get no answer ends at its deadline with an error;
// the session loads once the reads answer again.
func TestStore_LoadDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		session string // viewed while the reads block
		known   bool   // the session has records before the view
	}{
		{"checkpoint read", "a", true},
		{"records read", "a", true},
		{"a session the store has not met", "b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeLoader()
			release := make(chan struct{})
			releaseOnce := sync.OnceFunc(func() { close(release) })
			t.Cleanup(releaseOnce)
			fl := &funcLoader{fakeLoader: l}
			if tc.name == "records read" {
				fl.records = func(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
					if session == tc.session {
						if err := blockUntil(ctx, release); err != nil {
							return err
						}
					}
					return l.Records(ctx, session, from, to, fn)
				}
			} else {
				fl.checkpoint = func(ctx context.Context, session string) (Checkpoint, bool, error) {
					if session == tc.session {
						if err := blockUntil(ctx, release); err != nil {
							return Checkpoint{}, false, err
						}
					}
					return l.Checkpoint(ctx, session)
				}
			}
			s := newStore(t)
			s.Loader = fl
			s.LoadTimeout = 20 * time.Millisecond
			t.Cleanup(func() { s.Close() })
			if tc.known {
				ingest(s, l, tc.session, userRecord("one"))
			} else {
				// In the stream, from before the store started.
				l.publish(tc.session, userRecord("one"))
				s.Advance(l.lastSeq())
			}

			viewed := make(chan error, 1)
			go func() { viewed <- s.View(context.Background(), tc.session, func(*projection.Session) {}) }()
			select {
			case err := <-viewed:
				require.ErrorIs(t, err, context.DeadlineExceeded)
				require.ErrorContains(t, err, "store: load "+tc.session)
			case <-time.After(long):
				t.Fatal("View did not return at its load's deadline")
			}

			ingest(s, l, tc.session, userRecord("two"))
			ingest(s, l, "c", userRecord("another session"))
			require.Equal(t, l.lastSeq(), s.Applied())
			requireView(t, s, l, "c")

			releaseOnce()
			requireView(t, s, l, tc.session)
			requireCacheConsistent(t, s)
			require.NoError(t, s.Close())
		})
	}

	t.Run("the caller's context ends a load too", func(t *testing.T) {
		l := newFakeLoader()
		fl := &funcLoader{fakeLoader: l, records: func(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
			<-ctx.Done()
			return ctx.Err()
		}}
		s := newStore(t)
		s.Loader = fl
		ingest(s, l, "a", userRecord("one"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, s.View(ctx, "a", func(*projection.Session) {}), context.Canceled)
		require.Zero(t, s.Stats().Loaded)
	})
}

// Readers of a session that is loading wait for that load; a reader that
// gives up does not end it for the others.
func TestStore_ReadersShareALoad(t *testing.T) {
	l := newFakeLoader()
	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	fl := &funcLoader{fakeLoader: l, records: func(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
		entered <- struct{}{}
		if err := blockUntil(ctx, release); err != nil {
			return err
		}
		return l.Records(ctx, session, from, to, fn)
	}}
	s := newStore(t)
	s.Loader = fl
	s.LoadTimeout = long
	ingest(s, l, "a", userRecord("one"))

	const readers = 4
	results := make(chan error, readers)
	for range readers {
		go func() { results <- s.View(context.Background(), "a", func(p *projection.Session) {}) }()
	}
	<-entered
	// A reader that gives up while waiting.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- s.View(ctx, "a", func(*projection.Session) {}) }()
	cancel()
	select {
	case err := <-gaveUp:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(long):
		t.Fatal("a reader waiting for a load did not give up with its context")
	}

	releaseOnce()
	for range readers {
		require.NoError(t, <-results)
	}
	require.Len(t, entered, 0, "one load served every reader")
	require.Equal(t, uint64(1), s.Stats().Loads)
	require.NoError(t, s.Close())
}

// rejectedSeqs lists the sequences of the rejected records, oldest first.
func rejectedSeqs(s *Store) []uint64 {
	var out []uint64
	for _, r := range s.Rejected() {
		out = append(out, r.Seq)
	}
	return out
}

// Readers load sessions while the ingest applies to them and the cache
// evicts them: every view is Build over the session's records up to the
// view's sequence. Run under -race.
func TestStore_ConcurrentLoads(t *testing.T) {
	steps := 3000
	if testing.Short() {
		steps = 600
	}
	l := newFakeLoader()
	fl := &funcLoader{fakeLoader: l, records: func(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
		return l.Records(ctx, session, from, to, func(seq uint64, data []byte) error {
			runtime.Gosched() // let the ingest in while the load reads
			return fn(seq, data)
		})
	}}
	s := newLazyStore(t, l, lazyConfig{maxSessions: 2, maxBytes: 4000, maxSessionBytes: 3000, maxKnown: 3})
	s.Loader = fl
	g := &lazyGen{r: rand.New(rand.NewPCG(7, 7)), history: map[string][]*record.Map{}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var readers sync.WaitGroup
	for i := range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			r := rand.New(rand.NewPCG(uint64(i), 1))
			for ctx.Err() == nil {
				id := lazyPick(r, lazyAll...)
				if r.IntN(8) == 0 {
					s.Evict(id)
					continue
				}
				var got string
				var seq uint64
				err := s.View(ctx, id, func(p *projection.Session) {
					if p != nil {
						got, seq = string(p.AppendJSON(nil)), p.Seq()
					}
				})
				if ctx.Err() != nil {
					return
				}
				if !assert.NoError(t, err) || seq == 0 {
					continue
				}
				var recs []stored
				for _, rec := range l.stream(id) {
					if rec.seq <= seq {
						recs = append(recs, rec)
					}
				}
				want, _ := modelOf(recs, s.MaxSessionBytes).want(t)
				assert.Equal(t, want, got, "view of %s at %d", id, seq)
			}
		}()
	}
	r := rand.New(rand.NewPCG(3, 3))
	for range steps {
		id := lazyPick(r, lazySessions...)
		ingest(s, l, id, g.record(id))
		runtime.Gosched() // let the readers in
	}
	cancel()
	readers.Wait()
	require.NotZero(t, s.Stats().Loads)
	for _, id := range lazySessions {
		requireView(t, s, l, id)
	}
	requireCacheConsistent(t, s)
}
