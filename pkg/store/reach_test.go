package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// A store that no ingest feeds, brought up to each session's last record
// before every view (ViewAtChecked), as an instance that does not hold the
// ingest answers: every view equals Build over the session's records up
// to its seq, which is at least the record asked for, whatever was
// published, evicted or forgotten in between.
func TestStore_Catch(t *testing.T) {
	for _, c := range []lazyConfig{
		{maxSessions: 100, maxBytes: 1 << 30},
		{maxSessions: 2, maxBytes: 1 << 30},
		{maxSessions: 100, maxBytes: 1 << 30, maxSessionBytes: 3000},
		{maxSessions: 3, maxBytes: 1 << 30, maxKnown: 2},
	} {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("%s seed %d", c, seed), func(t *testing.T) {
				l := newFakeLoader()
				gen := &lazyGen{r: rand.New(rand.NewPCG(seed, 11)), history: map[string][]*record.Map{}}
				sessions := []string{"a", "b", "c", "d", "e"}
				for range 20 { // some records before the store starts
					s := lazyPick(gen.r, sessions...)
					l.publish(s, gen.record(s))
				}
				st := newLazyStore(t, l, c)
				start := l.lastSeq()
				st.Advance(start) // as at open: the stream's last sequence
				for step := range 300 {
					s := lazyPick(gen.r, sessions...)
					switch gen.r.IntN(4) {
					case 0, 1:
						l.publish(s, gen.record(s))
					case 2:
						st.Evict(s)
					}
					recs := l.stream(s)
					var last uint64
					if len(recs) > 0 {
						last = recs[len(recs)-1].seq
					}
					m := modelOf(recs, st.MaxSessionBytes)
					want, _ := m.want(t)
					var got string
					var seq uint64
					require.NoError(t, st.ViewAtChecked(context.Background(), s, last, nil, func(p *projection.Session) {
						got = "[]"
						if p != nil {
							got, seq = string(p.AppendJSON(nil)), p.Seq()
						}
					}))
					require.GreaterOrEqual(t, seq, last, "step %d: %s", step, s)
					require.Equal(t, want, got, "step %d: view of %s", step, s)
				}
				require.Equal(t, start, st.Applied(), "Catch leaves the watermark alone")
			})
		}
	}
}

// ViewAtChecked of one session from many goroutines, while records are
// published: each view is Build over the records up to its seq.
func TestStore_CatchConcurrent(t *testing.T) {
	l := newFakeLoader()
	gen := &lazyGen{r: rand.New(rand.NewPCG(5, 5)), history: map[string][]*record.Map{}}
	var mu sync.Mutex // the generator and the fake stream's order
	publish := func() {
		mu.Lock()
		defer mu.Unlock()
		l.publish("s", gen.record("s"))
	}
	for range 10 {
		publish()
	}
	st := newLazyStore(t, l, lazyConfig{maxSessions: 1, maxBytes: 1 << 30})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if g == 0 {
					publish()
				}
				if i%7 == 0 {
					st.Evict("s")
				}
				recs := l.stream("s")
				last := recs[len(recs)-1].seq
				var seq uint64
				var js string
				err := st.ViewAtChecked(context.Background(), "s", last, nil, func(p *projection.Session) {
					seq, js = p.Seq(), string(p.AppendJSON(nil))
				})
				if err != nil {
					t.Error(err)
					return
				}
				if seq < last {
					t.Errorf("seq %d below %d", seq, last)
					return
				}
				var upTo []stored
				for _, r := range l.stream("s") {
					if r.seq <= seq {
						upTo = append(upTo, r)
					}
				}
				want, _ := modelOf(upTo, 0).want(t)
				if js != want {
					t.Errorf("view at seq %d differs from Build over its records", seq)
					return
				}
			}
		}()
	}
	wg.Wait()
}
