package store

import (
	"context"
	"fmt"
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

// gatedLoader is a seqLoader whose reads of records, by scan or by
// sequence, first call gate.
type gatedLoader struct {
	seqLoader
	gate func(ctx context.Context, session string) error
}

func (l gatedLoader) Records(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
	if err := l.gate(ctx, session); err != nil {
		return err
	}
	return l.seqLoader.Records(ctx, session, from, to, fn)
}

func (l gatedLoader) RecordsAt(ctx context.Context, session string, seqs []uint64, fn func(uint64, []byte) error) error {
	if err := l.gate(ctx, session); err != nil {
		return err
	}
	return l.seqLoader.RecordsAt(ctx, session, seqs, fn)
}

// requireCovers checks a view of a session: Build over the session's
// records up to the view's sequence, holding every record of the session
// up to upTo.
func requireCovers(t *testing.T, l *fakeLoader, session, js string, seq, upTo uint64, maxSessionBytes int64) {
	t.Helper()
	var recs []stored
	for _, r := range l.stream(session) {
		if r.seq <= seq {
			recs = append(recs, r)
		}
		require.False(t, r.seq <= upTo && r.seq > seq, "the view of %s at %d misses record %d, at or below %d", session, seq, r.seq, upTo)
	}
	want, _ := modelOf(recs, maxSessionBytes).want(t)
	require.Equal(t, want, js, "view of %s at %d", session, seq)
}

// After a restart the store's watermark is the stream's last sequence,
// and the consumer delivers its backlog: records it never handed on, and
// after their ack wait those not acknowledged. A session the backlog
// meets from a compaction on loads every record up to the watermark, and
// a record of it the backlog delivers during the load is not lost.
func TestStore_RestartBacklog(t *testing.T) {
	l := newFakeLoader()
	// The stream as the previous run left it.
	c := l.publish("s", compactionRecord("kept"))
	r1 := l.publish("s", userRecord("one"))
	l.publish("other", userRecord("other"))
	r2 := l.publish("s", userRecord("two"))
	r3 := l.publish("s", userRecord("three"))
	data := map[uint64][]byte{}
	for _, r := range l.stream("s") {
		data[r.seq] = r.data
	}

	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() {}); close(release) })
	s := newStore(t)
	s.Loader = gatedLoader{seqLoader{l}, func(ctx context.Context, session string) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		close(entered)
		return blockUntil(ctx, release)
	}}
	s.LoadTimeout = long
	t.Cleanup(func() { s.Close() })
	s.Advance(l.lastSeq()) // as app.Open does
	s.Apply("s", c, data[c])

	type result struct {
		js  string
		seq uint64
		err error
	}
	viewed := make(chan result, 1)
	go func() {
		var res result
		res.err = s.View(context.Background(), "s", func(p *projection.Session) {
			res.js, res.seq = string(p.AppendJSON(nil)), p.Seq()
		})
		viewed <- res
	}()
	select {
	case <-entered:
	case <-time.After(long):
		t.Fatal("the load never read the stream")
	}
	s.Apply("s", r1, data[r1]) // the backlog goes on during the load
	release <- struct{}{}
	res := <-viewed
	require.NoError(t, res.err)
	requireCovers(t, l, "s", res.js, res.seq, s.Applied(), s.MaxSessionBytes)

	s.Apply("s", r2, data[r2])
	s.Apply("s", r3, data[r3])
	requireView(t, s, l, "s")
	s.Evict("s")
	requireView(t, s, l, "s")
	after := ingest(s, l, "s", userRecord("four"))
	js, seq, _ := viewJSON(t, s, "s")
	require.Equal(t, after, seq)
	requireCovers(t, l, "s", js, seq, after, s.MaxSessionBytes)
}

// A session the store forgot, met again through an old compaction
// delivered again, loads every record it has, not those from the
// compaction the store met.
func TestStore_ForgottenSessionMetAgainThroughAnOldCompaction(t *testing.T) {
	l := newFakeLoader()
	s := newStore(t)
	s.Loader = seqLoader{l}
	s.MaxKnown = 1
	t.Cleanup(func() { s.Close() })
	ingest(s, l, "s", userRecord("one"))
	c := ingest(s, l, "s", compactionRecord("kept"))
	ingest(s, l, "s", userRecord("two"))
	ingest(s, l, "other", userRecord("other"))
	ingest(s, l, "s", userRecord("three"))
	require.NoError(t, s.checkpoints.flush(context.Background()))
	// Each session met sweeps the directory, past MaxKnown; the first
	// pass gives the sessions just used a second chance.
	for i := 0; i < 10 && s.slot("s", false) != nil; i++ {
		ingest(s, l, fmt.Sprintf("o%d", i), userRecord("more"))
	}
	require.Nil(t, s.slot("s", false), "forgotten")

	s.Apply("s", c, l.stream("s")[1].data) // not acknowledged in time: delivered again
	js, seq, _ := viewJSON(t, s, "s")
	requireCovers(t, l, "s", js, seq, s.Applied(), s.MaxSessionBytes)
	requireView(t, s, l, "s")
}

// yieldingLoader is a seqLoader that lets the ingest in between the
// records it reads.
type yieldingLoader struct{ seqLoader }

func (l yieldingLoader) Records(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
	return l.seqLoader.Records(ctx, session, from, to, func(seq uint64, data []byte) error {
		runtime.Gosched()
		return fn(seq, data)
	})
}

func (l yieldingLoader) RecordsAt(ctx context.Context, session string, seqs []uint64, fn func(uint64, []byte) error) error {
	return l.seqLoader.RecordsAt(ctx, session, seqs, func(seq uint64, data []byte) error {
		runtime.Gosched()
		return fn(seq, data)
	})
}

// Readers load sessions, by sequence when they can, while the ingest
// goes over a restart's backlog and new records and the cache evicts:
// every view is Build over the session's records up to its sequence, and
// holds every record of the session up to the watermark its reader saw
// before asking. Run under -race.
func TestStore_ConcurrentLoadsBySeqAcrossRestarts(t *testing.T) {
	rounds, steps := 8, 400
	if testing.Short() {
		rounds, steps = 8, 120
	}
	l := newFakeLoader()
	g := &lazyGen{r: rand.New(rand.NewPCG(11, 11)), history: map[string][]*record.Map{}}
	r := rand.New(rand.NewPCG(5, 5))
	var handled uint64 // the last record the previous run handed to its store
	for round := range rounds {
		s := newLazyStore(t, l, lazyConfig{maxSessions: 2, maxBytes: 4000, maxSessionBytes: 3000, maxKnown: 3})
		s.Loader = yieldingLoader{seqLoader{l}}
		s.LoadTimeout = long
		s.Advance(l.lastSeq())
		// The consumer's backlog: past its ack floor, the records it never
		// delivered, then, after their ack wait, those not acknowledged.
		floor := handled - min(handled, uint64(r.IntN(80)))
		delivered := floor + uint64(r.IntN(int(l.lastSeq()-floor)+1))
		backlog := append(l.between(delivered, l.lastSeq()), l.between(floor, delivered)...)
		// Some of it before the first request.
		for range r.IntN(len(backlog) + 1) {
			d := backlog[0]
			backlog = backlog[1:]
			s.Apply(d.session, d.seq, d.data)
		}

		ctx, cancel := context.WithCancel(context.Background())
		var readers sync.WaitGroup
		for i := range 3 {
			readers.Add(1)
			go func() {
				defer readers.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(i)))
				for ctx.Err() == nil {
					id := lazyPick(r, lazyAll...)
					if r.IntN(8) == 0 {
						s.Evict(id)
						continue
					}
					upTo := s.Applied()
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
					if !assert.NoError(t, err) {
						continue
					}
					if seq == 0 {
						got = ""
					}
					var recs []stored
					for _, rec := range l.stream(id) {
						if rec.seq <= seq {
							recs = append(recs, rec)
						}
						assert.False(t, rec.seq <= upTo && rec.seq > seq, "round %d: the view of %s at %d misses record %d, at or below %d", round, id, seq, rec.seq, upTo)
					}
					if seq > 0 {
						want, _ := modelOf(recs, s.MaxSessionBytes).want(t)
						assert.Equal(t, want, got, "round %d: view of %s at %d", round, id, seq)
					}
				}
			}()
		}
		for range steps {
			if len(backlog) > 0 && r.IntN(2) == 0 {
				d := backlog[0]
				backlog = backlog[1:]
				s.Apply(d.session, d.seq, d.data)
			} else {
				id := lazyPick(r, lazySessions...)
				ingest(s, l, id, g.record(id))
				handled = l.lastSeq()
			}
			runtime.Gosched() // let the readers in
		}
		cancel()
		readers.Wait()
		if t.Failed() {
			return
		}
		for _, id := range lazySessions {
			requireView(t, s, l, id)
		}
		requireCacheConsistent(t, s)
		if r.IntN(2) == 0 {
			require.NoError(t, s.SaveCheckpoints(context.Background()))
		}
		require.NoError(t, s.Close())
		// Records stored in the stream that the store never applied.
		for range r.IntN(6) {
			id := lazyPick(r, lazySessions...)
			l.publish(id, g.record(id))
		}
	}
}

// A record met again (a restart's backlog, a redelivery) is counted as a
// duplicate and not decoded.
func TestStore_ApplyDoesNotDecodeARecordMetAgain(t *testing.T) {
	l := newFakeLoader()
	s := newStore(t)
	s.Loader = l
	t.Cleanup(func() { s.Close() })
	var recs []stored
	for i := range 20 {
		data := fmt.Appendf(nil, `{"role":"assistant","content":[{"type":"toolCall","id":"c%d","name":"bash","arguments":{"cmd":"go test ./...","env":{"A":"1","B":"2"}}}]}`, i)
		recs = append(recs, stored{ingest(s, l, "a", data), data})
	}
	requireView(t, s, l, "a")
	before := s.Stats().Duplicates
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		r := recs[i%len(recs)]
		i++
		s.Apply("a", r.seq, r.data)
	})
	require.Equal(t, before+101, s.Stats().Duplicates) // AllocsPerRun runs once more to warm up
	require.Zero(t, allocs, "a record met again is decoded")
	requireView(t, s, l, "a")
}
