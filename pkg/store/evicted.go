package store

import (
	"context"
	"slices"
	"sync"

	"github.com/ctxd/ctxd/pkg/projection"
)

// A session the cache evicts would otherwise load again from every
// record since its compaction, read by sequence from wherever they lie in
// the stream: under a cache smaller than the sessions, that is most of
// what the stream serves. With EvictSnapshots set, eviction hands the
// session's projection to a writer that writes its snapshot behind it
// (what CloseSnapshots writes at shutdown), and a later load of the
// session, knowing its index, reads that snapshot and the records after
// it (readIndexAfterSnapshot): the snapshot is used only as snapshot.go's checks
// allow, and when it ends on a prefix of the session's index.
//
// The projections waiting for their snapshot are out of the cache, and
// bounded: past evictBacklog bytes of them, an evicted session gets no
// snapshot and loads by its index as before. A snapshot not written (the
// bucket refused it, or the write failed) is dropped, not tried again: it
// is a hint, and the next eviction writes the session's again.

// evictBacklog bounds the bytes of evicted projections waiting for their
// snapshots: a share of the cache, at least minEvictBacklog. They are
// out of the cache's count, and so beside MaxBytes.
func (s *Store) evictBacklog() int64 { return max(s.MaxBytes/16, minEvictBacklog) }

const minEvictBacklog = 4 << 20

// minEvictRecords is the fewest records since its compaction a session
// evicted has its snapshot written with, and since its snapshot written
// before: a load of fewer costs less than the snapshot's write and read.
// Tests lower it.
var minEvictRecords = 32

// evictWrite is how many snapshots of evicted sessions one write stores:
// what the bucket's writes hold in flight stays a few of them.
const evictWrite = 4

// evictedSnap is an evicted session's projection and what its snapshot
// says besides it.
type evictedSnap struct {
	sl   *slot
	sn   *snapshot
	proj *projection.Session
	size int64
}

// evictWriter writes the snapshots of evicted sessions; its goroutine
// runs while there is something to write, and close stops it.
type evictWriter struct {
	mu      sync.Mutex
	pending map[string]evictedSnap // the latest of each session
	bytes   int64                  // of pending and the batch in hand
	running bool
	closed  bool
	cancel  context.CancelFunc // ends the write in hand, at close
	wg      sync.WaitGroup
}

// idle reports whether nothing is waiting to be written or being written.
func (w *evictWriter) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.running && len(w.pending) == 0
}

// evicting is called by the cache for each slot it evicts, locked, with
// the stream's identity and removed count EvictSnapshots gave before the
// pass.
func (s *Store) evicting(sl *slot, stream string, removed uint64) {
	if len(sl.seqs) < minEvictRecords {
		return
	}
	if sl.snapped != 0 && sl.snappedAt == removed && len(upFrom(sl.seqs, sl.snapped+1)) < minEvictRecords {
		// Its snapshot is written, and loads with the few records after
		// it: a session evicted at every other turn is written once in
		// so many records, not at each eviction.
		return
	}
	sn := s.snapshotMeta(sl, stream, removed)
	if sn == nil {
		return
	}
	w := &s.evictSnaps
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if old, ok := w.pending[sl.id]; ok {
		w.bytes -= old.size
	} else if w.bytes+sl.size > s.evictBacklog() {
		return
	}
	if w.pending == nil {
		w.pending = map[string]evictedSnap{}
	}
	w.pending[sl.id] = evictedSnap{sl: sl, sn: sn, proj: sl.proj, size: sl.size}
	w.bytes += sl.size
	if !w.running {
		w.running = true
		ctx, cancel := context.WithCancel(context.Background())
		w.cancel = cancel
		w.wg.Add(1)
		go s.writeEvicted(ctx)
	}
}

// writeEvicted is the writer's goroutine: it writes what is pending, in
// batches, until nothing is.
func (s *Store) writeEvicted(ctx context.Context) {
	w := &s.evictSnaps
	defer w.wg.Done()
	for {
		w.mu.Lock()
		batch := w.pending
		w.pending = nil
		if len(batch) == 0 || w.closed {
			w.running = false
			w.cancel()
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		s.writeEvictedBatch(ctx, batch)
		var freed int64
		for _, e := range batch {
			freed += e.size
		}
		w.mu.Lock()
		w.bytes -= freed
		w.mu.Unlock()
	}
}

// writeEvictedBatch writes a batch of evicted sessions' snapshots,
// evictWrite at a time, and marks those written on their slots.
func (s *Store) writeEvictedBatch(ctx context.Context, batch map[string]evictedSnap) {
	sv, ok := s.Loader.(SnapshotLoader)
	if !ok {
		return
	}
	all := make([]evictedSnap, 0, len(batch))
	for _, e := range batch {
		all = append(all, e)
	}
	removed := map[uint64]bool{}
	for part := range slices.Chunk(all, evictWrite) {
		if s.writeEvictedPart(ctx, sv, part) {
			removed[part[0].sn.removed] = true
		} else if ctx.Err() != nil {
			break
		}
	}
	if s.SnapshotsWritten != nil {
		for r := range removed {
			s.SnapshotsWritten(ctx, r)
		}
	}
}

// writeEvictedPart writes a few evicted sessions' snapshots, and reports
// whether it wrote them; those of a session removed since are not.
func (s *Store) writeEvictedPart(ctx context.Context, sv SnapshotLoader, part []evictedSnap) bool {
	ctx, cancel := context.WithTimeout(ctx, s.SaveTimeout)
	defer cancel()
	snaps := func(yield func(string, []byte) bool) {
		for _, e := range part {
			e.sl.mu.Lock()
			dead := e.sl.dead
			e.sl.mu.Unlock()
			if dead {
				continue // forgotten: records of it may have left the stream
			}
			// The projection is the writer's alone: evicted, it is no
			// slot's.
			if !yield(e.sl.id, encodeSnapshot(nil, e.sn, e.proj)) {
				return
			}
		}
	}
	n, _, err := sv.SaveSnapshots(ctx, snaps)
	if err != nil {
		if ctx.Err() == nil {
			s.Logger.Warn("snapshots of evicted sessions not written; those sessions load by their index", "err", err)
		}
		return false
	}
	for _, e := range part {
		e.sl.mu.Lock()
		// The hint a load by index reads the snapshot on. One the bucket
		// refused as too large is found missing, or older, by the load.
		if !e.sl.dead && e.sn.seq >= e.sl.snapped {
			e.sl.snapped, e.sl.snappedAt = e.sn.seq, e.sn.removed
		}
		e.sl.mu.Unlock()
	}
	return n > 0
}

// close stops the writer and waits for it: what is left is dropped.
func (w *evictWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.pending = nil
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
}

// useIndexedSnapshot returns the session's snapshot f when a load by the
// session's index seqs, from its latest compaction from up to to, may
// start from it: useSnapshot's checks, and the snapshot starts at the same
// compaction and lists the index's records up to its last. nil otherwise.
func (s *Store) useIndexedSnapshot(ctx context.Context, f fetched, session string, from uint64, seqs []uint64, to uint64) *restored {
	snap := s.useSnapshot(ctx, f, session, Checkpoint{From: from}, true, to)
	if snap == nil || snap.sn.from != from || !slices.Equal(snap.sn.seqs, upTo(seqs, snap.sn.seq)) {
		return nil
	}
	return snap
}

// readIndexAfterSnapshot starts a load by index from a snapshot: its
// projection, and the index's records after its last. The snapshot's last
// record is read first, and not applied, as readAfterSnapshot reads it: a
// record of another subject there fails the read with ErrIndexStale.
func (s *Store) readIndexAfterSnapshot(ctx context.Context, sr SeqLoader, session string, snap *restored, seqs []uint64, known []uint64, out **build) error {
	sn := snap.sn
	b := s.newBuild(session, sn.from, known)
	b.proj, b.weight, b.size = snap.proj, sn.weight, snap.proj.Size()
	b.seen = slices.Clone(sn.seqs)
	b.charge()
	*out = b
	read := append([]uint64{sn.seq}, upFrom(seqs, sn.seq+1)...)
	return sr.RecordsAt(ctx, session, read, func(seq uint64, data []byte) error {
		if seq == sn.seq {
			return nil // in the snapshot: read only to prove it is the session's
		}
		return b.addData(seq, data)
	})
}
