package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"iter"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// snapLoader is a seqLoader that keeps snapshots, and the stream's
// identity and removed count.
type snapLoader struct {
	seqLoader
	mu       *sync.Mutex
	snaps    map[string][]byte
	identity string
	removed  uint64
	maxValue int   // 0: any size
	states   int   // StreamState calls
	fail     error // SaveSnapshots fails with it after one write, when set
}

func newSnapLoader(l *fakeLoader) *snapLoader {
	return &snapLoader{seqLoader: seqLoader{l}, mu: new(sync.Mutex), snaps: map[string][]byte{}, identity: "TRANSCRIPTS@1"}
}

func (l *snapLoader) Snapshot(ctx context.Context, session string) ([]byte, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	data, ok := l.snaps[session]
	return slices.Clone(data), ok, ctx.Err()
}

func (l *snapLoader) SaveSnapshots(ctx context.Context, snaps iter.Seq2[string, []byte]) (written, tooLarge int, err error) {
	for id, data := range snaps {
		if l.fail != nil && written == 1 {
			return written, tooLarge, l.fail
		}
		if l.maxValue > 0 && len(data) > l.maxValue {
			tooLarge++
			continue
		}
		l.mu.Lock()
		l.snaps[id] = slices.Clone(data)
		l.mu.Unlock()
		written++
	}
	return written, tooLarge, ctx.Err()
}

func (l *snapLoader) StreamState(ctx context.Context) (string, uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states++
	return l.identity, l.removed, ctx.Err()
}

// snapStore is coldStore on a snapLoader.
func snapStore(t *testing.T, sl *snapLoader) *Store {
	s := coldStore(t, sl.fakeLoader, false)
	s.Loader = sl
	return s
}

// shutdown writes what a store writes at shutdown: its checkpoints, then
// its snapshots at the loader's removed count.
func shutdown(t *testing.T, s *Store, sl *snapLoader) (written int) {
	t.Helper()
	_, left, err := s.CloseCheckpoints(context.Background())
	require.NoError(t, err)
	require.Zero(t, left)
	w, _, err := s.CloseSnapshots(context.Background(), sl.identity, sl.removed)
	require.NoError(t, err)
	return w
}

// The first load after a restart starts from the session's snapshot: it
// reads, of the records up to the snapshot's last, that last one only,
// and the view is Build of every record of the session, whether records
// came after the snapshot was written or not. Generated sessions,
// restarted several times, with records between the restarts.
func TestStore_ColdLoadBySnapshot(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 91))
			l := newFakeLoader()
			sl := newSnapLoader(l)
			s := snapStore(t, sl)
			s.MaxSessionBytes = int64(2000 + 2000*(seed%3))
			ids := genSessions(s, l, r, 6, 300)
			g := &lazyGen{r: r, history: map[string][]*record.Map{}}
			for _, id := range ids {
				requireView(t, s, l, id) // loaded: snapshots are of loaded sessions
			}
			for round := range 3 {
				shutdown(t, s, sl)
				require.NoError(t, s.Close())
				if r.IntN(2) == 0 {
					// Records after the snapshots: a crash after them.
					genSessionsOnly(l, r, ids, 40)
				}
				fresh := snapStore(t, sl)
				fresh.MaxSessionBytes = s.MaxSessionBytes
				snapped := 0
				for _, id := range ids {
					sl.mu.Lock()
					data, has := sl.snaps[id]
					sl.mu.Unlock()
					before := l.seqReads
					reads := len(l.readsOf(id))
					loads := fresh.Stats().SnapshotLoads
					requireView(t, fresh, l, id)
					if !has {
						continue
					}
					sn, err := decodeSnapshot(data)
					require.NoError(t, err)
					if fresh.Stats().SnapshotLoads == loads {
						continue // not usable: a later compaction than the snapshot's, say
					}
					snapped++
					require.Equal(t, before+1, l.seqReads, "%s: one read by sequence", id)
					for _, rr := range l.readsOf(id)[reads:] {
						require.Greater(t, rr.from, sn.seq, "%s: the subject is read only after the snapshot", id)
					}
				}
				require.NotZero(t, snapped, "round %d: some sessions load by their snapshots", round)
				// Go on: the live store applies more, and is checked.
				for range 50 {
					id := ids[r.IntN(len(ids))]
					ingest(fresh, l, id, g.record(id))
				}
				for _, id := range ids {
					requireView(t, fresh, l, id)
				}
				s = fresh
			}
		})
	}
}

// snapshotFixture is a stream of two sessions, a and b, interleaved,
// with a compaction in a, loaded and shut down with snapshots written.
func snapshotFixture(t *testing.T) (*fakeLoader, *snapLoader) {
	t.Helper()
	l := newFakeLoader()
	sl := newSnapLoader(l)
	s := snapStore(t, sl)
	for i := range 30 {
		ingest(s, l, "a", userRecord(fmt.Sprintf("a %d", i)))
		ingest(s, l, "b", userRecord(fmt.Sprintf("b %d", i)))
		if i == 10 {
			ingest(s, l, "a", compactionRecord("kept"))
		}
	}
	requireView(t, s, l, "a")
	requireView(t, s, l, "b")
	require.Equal(t, 2, shutdown(t, s, sl))
	require.NoError(t, s.Close())
	return l, sl
}

// A snapshot that does not fit what the load needs is not used, and the
// view is Build of the session's records all the same: every condition
// of snapshot.go, each alone.
func TestStore_SnapshotNotUsed(t *testing.T) {
	check := func(t *testing.T, l *fakeLoader, sl *snapLoader, used bool, configure ...func(*Store)) {
		t.Helper()
		s := snapStore(t, sl)
		for _, c := range configure {
			c(s)
		}
		requireView(t, s, l, "a")
		requireView(t, s, l, "b")
		want := uint64(0)
		if used {
			want = 2
		}
		require.Equal(t, want, s.Stats().SnapshotLoads)
	}
	t.Run("as written: used", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		check(t, l, sl, true)
	})
	t.Run("records removed since", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		// One of each session's records, in its snapshot, leaves the
		// stream: a view from the snapshot would still hold it.
		l.mu.Lock()
		for _, id := range []string{"a", "b"} {
			recs := l.streams[id]
			l.streams[id] = slices.Delete(recs, len(recs)-3, len(recs)-2)
		}
		l.mu.Unlock()
		sl.removed += 2
		check(t, l, sl, false)
	})
	t.Run("another stream of the same name", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		sl.identity = "TRANSCRIPTS@2"
		check(t, l, sl, false)
	})
	t.Run("other limits", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		check(t, l, sl, false, func(s *Store) { s.MaxSessionBytes = 12345 })
	})
	t.Run("other projection options", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		check(t, l, sl, false, func(s *Store) { s.Options = projection.Options{BrowserTools: []string{"other_browser"}} })
	})
	t.Run("a later compaction than the snapshot's", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		// Written by another instance after the snapshot, say.
		c := l.publish("a", compactionRecord("later"))
		l.publish("a", userRecord("after"))
		l.mu.Lock()
		l.checkpoints["a"] = Checkpoint{From: c, Seq: c}
		l.mu.Unlock()
		s := snapStore(t, sl)
		requireView(t, s, l, "a")
		require.Zero(t, s.Stats().SnapshotLoads)
	})
	t.Run("ahead of the records the load reads", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		s := newStore(t)
		s.Loader = sl
		t.Cleanup(func() { s.Close() })
		s.Advance(3) // a store behind the snapshot
		js, seq, _ := viewJSON(t, s, "b")
		requireCovers(t, l, "b", js, seq, 3, s.MaxSessionBytes)
		require.Zero(t, s.Stats().SnapshotLoads)
	})
	t.Run("its last record is another session's", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		sl.mu.Lock()
		sl.snaps["a"], sl.snaps["b"] = sl.snaps["b"], sl.snaps["a"]
		sl.mu.Unlock()
		check(t, l, sl, false)
	})
	t.Run("every byte changed", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		good := slices.Clone(sl.snaps["b"])
		for i := range good {
			bad := slices.Clone(good)
			bad[i] ^= 0x5a
			sl.snaps["b"] = bad
			s := snapStore(t, sl)
			requireView(t, s, l, "b")
			require.Zero(t, s.Stats().SnapshotLoads, "byte %d", i)
		}
	})
	t.Run("cut short", func(t *testing.T) {
		l, sl := snapshotFixture(t)
		good := slices.Clone(sl.snaps["b"])
		for _, n := range []int{0, 1, 8, 9, len(good) / 2, len(good) - 1} {
			sl.snaps["b"] = good[:n]
			s := snapStore(t, sl)
			requireView(t, s, l, "b")
			require.Zero(t, s.Stats().SnapshotLoads, "%d bytes", n)
		}
	})
}

// Too large for the bucket: not written, and the session loads by its
// checkpoint.
func TestStore_SnapshotTooLarge(t *testing.T) {
	l := newFakeLoader()
	sl := newSnapLoader(l)
	sl.maxValue = 64
	s := snapStore(t, sl)
	ingest(s, l, "a", userRecord("one"))
	requireView(t, s, l, "a")
	_, _, err := s.CloseCheckpoints(context.Background())
	require.NoError(t, err)
	w, left, err := s.CloseSnapshots(context.Background(), sl.identity, sl.removed)
	require.NoError(t, err)
	require.Equal(t, 0, w)
	require.Equal(t, 1, left)
}

// A snapshot is written once a record: a second shutdown with nothing new
// writes none.
func TestStore_SnapshotWrittenOnce(t *testing.T) {
	l := newFakeLoader()
	sl := newSnapLoader(l)
	s := snapStore(t, sl)
	ingest(s, l, "a", userRecord("one"))
	requireView(t, s, l, "a")
	w, _, err := s.CloseSnapshots(context.Background(), sl.identity, sl.removed)
	require.NoError(t, err)
	require.Equal(t, 1, w)
	w, _, err = s.CloseSnapshots(context.Background(), sl.identity, sl.removed)
	require.NoError(t, err)
	require.Equal(t, 0, w)
	fresh := snapStore(t, sl)
	requireView(t, fresh, l, "a")
	require.Equal(t, uint64(1), fresh.Stats().SnapshotLoads)
	w, _, err = fresh.CloseSnapshots(context.Background(), sl.identity, sl.removed)
	require.NoError(t, err)
	require.Equal(t, 0, w, "loaded from it: written already")
}

// The decoder takes any bytes without panicking, and refuses what it
// does not take with ErrBadSnapshot; what it takes has sequences that
// hold together, and a projection that restores or is refused. Each
// input is tried as it is and with its checksum made right, so that
// mutations reach the fields behind it.
func FuzzDecodeSnapshot(f *testing.F) {
	l := newFakeLoader()
	sl := newSnapLoader(l)
	s := New()
	s.Loader = sl
	for i := range 20 {
		ingest(s, l, "a", userRecord(fmt.Sprintf("a %d", i)))
		if i == 5 {
			ingest(s, l, "a", compactionRecord("kept"))
		}
	}
	if err := s.View(context.Background(), "a", func(*projection.Session) {}); err != nil {
		f.Fatal(err)
	}
	if _, _, err := s.CloseSnapshots(context.Background(), sl.identity, 7); err != nil {
		f.Fatal(err)
	}
	s.Close()
	f.Add(sl.snaps["a"])
	f.Add([]byte(snapshotMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		inputs := [][]byte{data}
		if len(data) >= 4 {
			body := data[:len(data)-4]
			inputs = append(inputs, binary.BigEndian.AppendUint32(slices.Clone(body), crc32.Checksum(body, crcTable)))
		}
		for _, in := range inputs {
			sn, err := decodeSnapshot(in)
			if err != nil {
				require.ErrorIs(t, err, ErrBadSnapshot)
				continue
			}
			require.NoError(t, checkSeqs(sn.from, sn.seq, sn.seqs))
			if _, err := projection.Restore(projection.Options{}, sn.proj); err != nil {
				require.ErrorIs(t, err, projection.ErrSnapshot)
			}
		}
	})
}

// Behind the ingest, a session is snapshotted once it had no record since
// the round before; a session that changed waits; the budget bounds a
// round, and the rest come in later rounds. Each snapshot loads to Build
// of the session's records, with those after it.
func TestStore_WriteIdleSnapshots(t *testing.T) {
	l := newFakeLoader()
	sl := newSnapLoader(l)
	s := snapStore(t, sl)
	for i := range 20 {
		for _, id := range []string{"a", "b", "c"} {
			ingest(s, l, id, userRecord(fmt.Sprintf("%s %d", id, i)))
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		requireView(t, s, l, id)
	}
	round := func(budget int) int {
		n, err := s.WriteIdleSnapshots(context.Background(), sl.identity, sl.removed, budget)
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 0, round(1<<20), "the first round sees every session change")
	ingest(s, l, "a", userRecord("a goes on"))
	require.Equal(t, 1, round(1), "b and c idle; a budget of one byte takes one")
	require.Equal(t, 2, round(1<<20), "the other, and a, idle since")
	require.Equal(t, 0, round(1<<20), "nothing new")
	ingest(s, l, "b", userRecord("b after its snapshot"))

	// A crash: no shutdown. The next store loads from the snapshots.
	fresh := snapStore(t, sl)
	for _, id := range []string{"a", "b", "c"} {
		requireView(t, fresh, l, id)
	}
	require.Equal(t, uint64(3), fresh.Stats().SnapshotLoads)
}

// A write of snapshots that fails part way leaves those it did not write
// to a later call, at shutdown as behind the ingest.
func TestStore_SnapshotsWrittenAgainAfterAFailure(t *testing.T) {
	l := newFakeLoader()
	sl := newSnapLoader(l)
	s := snapStore(t, sl)
	for _, id := range []string{"a", "b", "c"} {
		ingest(s, l, id, userRecord(id))
		requireView(t, s, l, id)
	}
	sl.fail = errors.New("the bucket is away")
	w, left, err := s.CloseSnapshots(context.Background(), sl.identity, sl.removed)
	require.ErrorIs(t, err, sl.fail)
	require.Equal(t, 1, w)
	require.Equal(t, 1, left, "the one handed on and not written; the third never handed on")
	sl.fail = nil
	w, _, err = s.CloseSnapshots(context.Background(), sl.identity, sl.removed)
	require.NoError(t, err)
	require.Equal(t, 3, w, "the two handed on in the failed write, again, and the third")
	require.Len(t, sl.snaps, 3, "every session's snapshot stored")
}

// A snapshot written behind the ingest, then more records (compactions
// among them) and checkpoints written past the snapshot, then a crash
// and more records: a fresh store loads from the snapshot, the
// checkpoint's index after it and the subject after that, to Build of
// every record.
func TestStore_SnapshotThenCheckpointsPastIt(t *testing.T) {
	loads := 0
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			l := newFakeLoader()
			sl := newSnapLoader(l)
			s := snapStore(t, sl)
			s.MaxSessionBytes = int64(2000 + 2000*(seed%3))
			ids := genSessions(s, l, r, 5, 200)
			for _, id := range ids {
				requireView(t, s, l, id)
			}
			// Two rounds: a session is idle at the second.
			for range 2 {
				_, err := s.WriteIdleSnapshots(context.Background(), sl.identity, sl.removed, 1<<30)
				require.NoError(t, err)
			}
			g := &lazyGen{r: r, history: map[string][]*record.Map{}}
			for range 60 {
				id := ids[r.IntN(len(ids))]
				ingest(s, l, id, g.record(id))
			}
			_, _, err := s.CloseCheckpoints(context.Background())
			require.NoError(t, err)
			require.NoError(t, s.Close())
			genSessionsOnly(l, r, ids, 30) // after the crash
			fresh := snapStore(t, sl)
			fresh.MaxSessionBytes = s.MaxSessionBytes
			for _, id := range ids {
				requireView(t, fresh, l, id)
			}
			loads += int(fresh.Stats().SnapshotLoads)
		})
	}
	require.Positive(t, loads, "loads from the snapshots")
}

// A session the cache evicts has its snapshot written behind the
// eviction, and comes back from it: its load reads, of the records up to
// the snapshot's last, that last one only, and the view is Build of
// every record of the session, whether records came after the eviction
// or not.
func TestStore_EvictedSessionLoadsFromItsSnapshot(t *testing.T) {
	defer func(n int) { minEvictRecords = n }(minEvictRecords)
	minEvictRecords = 1
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 17))
			l := newFakeLoader()
			sl := newSnapLoader(l)
			s := snapStore(t, sl)
			s.Fresh = true
			s.MaxSessions = 2
			s.EvictSnapshots = func() (string, uint64, bool) {
				sl.mu.Lock()
				defer sl.mu.Unlock()
				return sl.identity, sl.removed, true
			}
			ids := genSessions(s, l, r, 5, 200)
			for _, id := range ids {
				requireView(t, s, l, id)
			}
			g := &lazyGen{r: r, history: map[string][]*record.Map{}}
			snapped := 0
			for round := range 4 {
				for _, id := range ids {
					// Loaded, then evicted by the next ones' views.
					requireView(t, s, l, id)
				}
				waitSnapshotsWritten(t, s)
				if round%2 == 1 {
					// Records after the snapshots, met while not loaded.
					for range 20 {
						id := ids[r.IntN(len(ids))]
						ingest(s, l, id, g.record(id))
					}
				}
				for _, id := range ids {
					sl.mu.Lock()
					data, has := sl.snaps[id]
					sl.mu.Unlock()
					before, loads := l.seqReads, s.Stats().SnapshotLoads
					reads := len(l.readsOf(id))
					requireView(t, s, l, id)
					if !has || s.Stats().SnapshotLoads == loads {
						continue
					}
					_, err := decodeSnapshot(data)
					require.NoError(t, err)
					snapped++
					require.Equal(t, before+1, l.seqReads, "%s: one read by sequence", id)
					require.Len(t, l.readsOf(id), reads, "%s: no read of the subject", id)
				}
			}
			require.NotZero(t, snapped, "evicted sessions load by their snapshots")
		})
	}
}

// waitSnapshotsWritten waits until the snapshots of evicted sessions
// handed to the writer are written.
func waitSnapshotsWritten(t *testing.T, s *Store) {
	t.Helper()
	require.Eventually(t, func() bool { return s.evictSnaps.idle() }, 10*time.Second, time.Millisecond)
}
