package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
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

// A record stored before a removal that took it, and delivered to the
// store after the removal was applied (Forget) and the session loaded
// again, is not applied: it was on its way (an ingest or a follower
// behind the stream's end) when the removal came, and the stream holds
// it no more. The load, resting on the stream as it is, reads up to the
// stream's end, so the session's later records apply after it and its
// removed ones are known as met.
func TestStore_RemovedRecordOnItsWay(t *testing.T) {
	cfg := lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: true}
	for _, loaded := range []bool{true, false} {
		for _, how := range []string{"session", "all", "holding"} {
			t.Run(fmt.Sprintf("loaded=%v/%s", loaded, how), func(t *testing.T) {
				l := newFakeLoader()
				s := newFreshStore(t, l, cfg, true)
				t.Cleanup(func() { s.Close() })
				ingest(s, l, "a", userRecord("a0"))
				ingest(s, l, "a", userRecord("a1"))
				if loaded {
					requireView(t, s, l, "a")
				}
				// Stored, not delivered yet.
				var late []delivery
				for i := range 2 {
					data := userRecord(fmt.Sprintf("a%d", i+2))
					late = append(late, delivery{session: "a", seq: l.publish("a", data), data: data})
					data = userRecord(fmt.Sprintf("b%d", i))
					late = append(late, delivery{session: "b", seq: l.publish("b", data), data: data})
				}
				l.remove("a", func(uint64) bool { return true })
				switch how {
				case "session":
					s.Forget("a")
				case "all":
					s.ForgetAll()
				case "holding":
					s.ForgetHolding(1)
				}
				requireView(t, s, l, "a") // loads again: the stream holds none of a
				for _, d := range late {
					s.Apply(d.session, d.seq, d.data)
				}
				ingest(s, l, "a", userRecord("a4"))
				requireView(t, s, l, "a")
				requireView(t, s, l, "b")
			})
		}
	}
}

// The store an ingest or a follower feeds, with records delivered some
// time after they are stored and removals applied as they are made:
// whatever was removed when, and whichever records were still on their
// way then, every view of a session equals Build over the records the
// stream holds of it up to the view's sequence, and once every record
// is delivered each view reaches the session's last record. Generated
// sequences of publishes, deliveries, removals (of a session's records,
// of one record, of all), evictions, restarts (the records on their way
// becoming a backlog below the new store's watermark) and views.
func TestStore_RemovalsWithRecordsOnTheirWay(t *testing.T) {
	seeds := 1000
	if testing.Short() {
		seeds = 200
	}
	for seed := range uint64(seeds) {
		runOnTheirWay(t, seed)
		if t.Failed() {
			return
		}
	}
}

func runOnTheirWay(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x7a7))
	cfg := lazyConfig{maxSessions: lazyPick(r, 1, 2, 100), maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: true}
	l := newFakeLoader()
	s := newFreshStore(t, l, cfg, r.IntN(2) == 0)
	defer func() { s.Close() }()
	sessions := []string{"a", "b", "c"}
	var way []delivery // stored, not delivered yet, in order
	var log []string
	check := func(session string) uint64 {
		got, seq, _ := viewJSON(t, s, session)
		var upTo []stored
		for _, rec := range l.stream(session) {
			if rec.seq <= seq {
				upTo = append(upTo, rec)
			}
		}
		want, _ := modelOf(upTo, s.MaxSessionBytes).want(t)
		if want != got {
			t.Errorf("seed %d: view of %s at seq %d:\n got %s\nwant %s\nsteps:\n%s", seed, session, seq, got, want, strings.Join(log, "\n"))
		}
		return seq
	}
	for step := 0; step < 120 && !t.Failed(); step++ {
		id := sessions[r.IntN(len(sessions))]
		switch n := r.IntN(100); {
		case n < 35:
			data := userRecord(fmt.Sprintf("%s%d", id, step))
			if r.IntN(8) == 0 {
				data = compactionRecord(fmt.Sprintf("%s%d", id, step))
			}
			seq := l.publish(id, data)
			way = append(way, delivery{id, seq, data})
			log = append(log, fmt.Sprintf("publish %s %d", id, seq))
		case n < 60 && len(way) > 0:
			k := 1 + r.IntN(len(way))
			for _, d := range way[:k] {
				s.Apply(d.session, d.seq, d.data)
			}
			log = append(log, fmt.Sprintf("deliver up to %d", way[k-1].seq))
			way = way[k:]
		case n < 68:
			recs := l.stream(id)
			if len(recs) == 0 {
				continue
			}
			switch r.IntN(3) {
			case 0: // a purge of the session's subject
				l.remove(id, func(uint64) bool { return true })
				s.Forget(id)
				log = append(log, "purge "+id)
			case 1: // one message deleted
				seq := recs[r.IntN(len(recs))].seq
				l.remove(id, func(x uint64) bool { return x == seq })
				s.ForgetHolding(seq)
				log = append(log, fmt.Sprintf("delete %d", seq))
			default: // records up to one kept (purge --keep), told as unknown
				keep := recs[r.IntN(len(recs))].seq
				l.remove(id, func(x uint64) bool { return x < keep })
				s.ForgetAll()
				log = append(log, fmt.Sprintf("purge %s below %d", id, keep))
			}
		case n < 74:
			s.Evict(id)
			log = append(log, "evict "+id)
		case n < 77:
			// A restart: the new store's watermark starts at the
			// stream's end, above the records still on their way (its
			// backlog, delivered later as the consumer resumes).
			// The consumer reads its backlog from the stream again:
			// what removals took before the restart does not come.
			s.Close()
			s = newFreshStore(t, l, cfg, false)
			s.Advance(l.lastSeq())
			way = slices.DeleteFunc(way, func(d delivery) bool {
				return !slices.ContainsFunc(l.stream(d.session), func(r stored) bool { return r.seq == d.seq })
			})
			log = append(log, fmt.Sprintf("restart at %d", l.lastSeq()))
		default:
			log = append(log, fmt.Sprintf("view %s at %d", id, check(id)))
		}
	}
	for _, d := range way {
		s.Apply(d.session, d.seq, d.data)
	}
	for _, id := range sessions {
		seq := check(id)
		recs := l.stream(id)
		if len(recs) > 0 && seq < recs[len(recs)-1].seq {
			t.Errorf("seed %d: view of %s at seq %d, its last record %d", seed, id, seq, recs[len(recs)-1].seq)
		}
	}
}

// A store that no ingest feeds (Catch brings its sessions up to what a
// request needs) has no record on its way: after a removal its loads
// read what they read before, without reading the stream's end, and a
// record deleted by sequence is not noted for an Apply that never comes.
func TestStore_CaughtStoreAfterRemoval(t *testing.T) {
	l := newFakeLoader()
	st := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: true})
	t.Cleanup(func() { st.Close() })
	view := func(session string) {
		recs := l.stream(session)
		last := recs[len(recs)-1].seq
		want, _ := modelOf(recs, st.MaxSessionBytes).want(t)
		var got string
		require.NoError(t, st.ViewAtChecked(context.Background(), session, last, nil, func(p *projection.Session) { got = string(p.AppendJSON(nil)) }))
		require.Equal(t, want, got)
	}
	for i := range 4 {
		l.publish("a", userRecord(fmt.Sprintf("a%d", i)))
		l.publish("b", userRecord(fmt.Sprintf("b%d", i)))
	}
	view("a")
	l.remove("a", func(seq uint64) bool { return seq < 3 })
	st.Forget("a")
	st.ForgetHolding(7)
	view("a")
	view("b")
	require.Zero(t, l.lasts, "reads of the stream's end")
	require.Zero(t, st.way.n.Load(), "deletions noted")
}

// hookLoader runs hook once, as the first read of session a has read
// its records and before it hands them on.
type hookLoader struct {
	seqLoader
	once sync.Once
	hook func()
}

func (h *hookLoader) Records(ctx context.Context, session string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	h.fakeLoader.mu.Lock()
	var recs []stored
	for _, r := range h.fakeLoader.streams[session] {
		if r.seq >= from && r.seq <= to {
			recs = append(recs, r)
		}
	}
	h.fakeLoader.mu.Unlock()
	if session == "a" && h.hook != nil {
		h.once.Do(h.hook) // deleted after the read met it
	}
	for _, r := range recs {
		if err := fn(r.seq, r.data); err != nil {
			return err
		}
	}
	return nil
}

// A record deleted by sequence while a load reads it (past the
// watermark, after a removal): the load reads again, and the record,
// when it comes, is not applied.
func TestStore_DeletedWhileLoading(t *testing.T) {
	l := newFakeLoader()
	s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: true})
	hl := &hookLoader{seqLoader: seqLoader{l}}
	s.Loader = hl
	t.Cleanup(func() { s.Close() })
	ingest(s, l, "a", userRecord("a1"))
	ingest(s, l, "b", userRecord("b1"))
	a2 := userRecord("a2")
	seq := l.publish("a", a2) // on its way
	s.Forget("b")
	hl.hook = func() {
		l.remove("a", func(q uint64) bool { return q == seq })
		s.ForgetHolding(seq)
	}
	var got string
	require.NoError(t, s.View(context.Background(), "a", func(p *projection.Session) { got = string(p.AppendJSON(nil)) }))
	s.Apply("a", seq, a2)
	require.NoError(t, s.View(context.Background(), "a", func(p *projection.Session) { got = string(p.AppendJSON(nil)) }))
	require.Equal(t, `[{"role":"user","content":"a1"}]`, got)
}

// A record of a restart's backlog (below the watermark the store
// started at) deleted before it is delivered: a load after the deletion
// does not read it, and it is not applied when it comes.
func TestStore_BacklogRecordDeleted(t *testing.T) {
	l := newFakeLoader()
	s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: DefaultMaxSessionBytes, bySeq: true})
	t.Cleanup(func() { s.Close() })
	a1, a2 := userRecord("a1"), userRecord("a2")
	l.publish("a", a1)
	seq := l.publish("a", a2)
	s.Advance(seq) // a restart: the watermark starts at the stream's end
	s.Apply("a", 1, a1)
	l.remove("a", func(q uint64) bool { return q == seq })
	s.ForgetHolding(seq)
	var got string
	require.NoError(t, s.View(context.Background(), "a", func(p *projection.Session) { got = string(p.AppendJSON(nil)) }))
	s.Apply("a", seq, a2) // was in the ingest's pull buffer
	require.NoError(t, s.View(context.Background(), "a", func(p *projection.Session) { got = string(p.AppendJSON(nil)) }))
	require.Equal(t, `[{"role":"user","content":"a1"}]`, got)
}
