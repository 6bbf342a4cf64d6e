package app

import (
	"context"
	"iter"
	"sync"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
)

// Snapshots of the sessions' projections (store.Snapshot) are written at
// shutdown, by the instance that applied the sessions, after its
// checkpoints and after it has handed its ingest over: the first load of
// each session after a restart, on any instance, then reads one value and
// the session's last record instead of every record since its compaction.
//
// A snapshot carries the stream's count of removed sequences at which
// every removal had been applied to the store it was taken from, and a
// load uses it only while the stream's count is still that: a record
// removed since it was written may be in it. So none are written when
// that count cannot be said: on a stream that removes records of its own
// accord (limits), or while a removal is not applied yet.

// sweepSnapshots empties the snapshot bucket at start when its snapshots
// were written at another removed count or of another stream: none of
// them would be used, and they may hold records removed since.
func (a *App) sweepSnapshots(ctx context.Context) {
	if a.loader.snaps == nil {
		return
	}
	now := bus.SnapshotState{Stream: a.loader.identity, Removed: a.removals.Count()}
	swept, err := a.loader.snaps.Sweep(ctx, now)
	switch {
	case err != nil:
		a.Logger.Warn("snapshots not checked at start; those written before a removal are not used, but stay", "err", err)
	case swept:
		a.Logger.Info("snapshots emptied: written before records left the stream, or of another stream", "removed", now.Removed)
	}
}

// dropSnapshots empties the snapshot bucket after records left the
// stream: no snapshot written before is used again, and what they hold
// of the records removed must go with them. It runs beside the removal
// watcher, which it must not hold up.
// One asked for while one runs makes the running one empty the bucket
// again when it is done: what was written meanwhile goes too.
func (a *App) dropSnapshots() {
	if a.loader == nil || a.loader.snaps == nil {
		return
	}
	a.evictLabel.Store(nil) // until the next round of idle snapshots
	if a.snapsDrops.Add(1) > 1 {
		return
	}
	a.bg.Go(func() {
		for {
			ctx, cancel := context.WithTimeout(a.life, 10*time.Second)
			a.emptySnapshots(ctx)
			cancel()
			if a.snapsDrops.CompareAndSwap(1, 0) {
				return
			}
			a.snapsDrops.Store(1) // asked again meanwhile: once more
		}
	})
}

// purgeSnapshots empties the snapshot bucket.
func (a *App) purgeSnapshots(ctx context.Context) {
	if err := a.loader.snaps.Purge(ctx); err != nil {
		a.Logger.Warn("snapshots not emptied after records left the stream; they are not used, and are emptied at the next start", "err", err)
	}
}

// snapshotLabel is the stream's removed count that snapshots of the
// stores the removals concern now may be written at, when ok
// (appliedRemovals); none is read when no snapshot is written.
type snapshotLabel struct {
	removed uint64
	ok      bool
}

func (a *App) snapshotLabel() snapshotLabel {
	if a.loader == nil || a.loader.snaps == nil {
		return snapshotLabel{}
	}
	removed, ok := a.removals.Applied(a.life)
	return snapshotLabel{removed, ok}
}

// closeSnapshots writes the snapshots of the stores' loaded sessions
// within ShutdownCheckpoints, as closeCheckpoints writes their
// checkpoints, with one line saying how many. label was read while the
// stores were among those the removals concern.
func (a *App) closeSnapshots(label snapshotLabel, sts ...*store.Store) {
	if a.loader == nil || a.loader.snaps == nil || len(sts) == 0 {
		return
	}
	if !label.ok {
		a.Logger.Info("snapshots at shutdown: none written, the stream's removals are not all applied or not counted; sessions load by their checkpoints")
		return
	}
	removed := label.removed
	within := a.ShutdownCheckpoints
	if within <= 0 {
		within = DefaultShutdownCheckpoints
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(a.life, within) // Close calls it before the end of life
	defer cancel()
	written, left, err := closeEach(sts, func(st *store.Store) (int, int, error) {
		return st.CloseSnapshots(ctx, a.loader.identity, removed)
	})
	if written > 0 {
		if err := a.loader.snaps.MarkState(ctx, bus.SnapshotState{Stream: a.loader.identity, Removed: removed}); err != nil {
			a.Logger.Warn("snapshots' state not written; the next start empties them", "err", err)
		}
		// A removal while they were written: an instance that applied it
		// may have emptied the bucket before they landed. None of them is
		// used (the count moved), but they may hold what was removed.
		if now, _, err := bus.Removed(ctx, a.nc, a.stream); err == nil && now != removed {
			a.purgeSnapshots(ctx)
		}
	}
	took := time.Since(start).Round(time.Millisecond)
	if left == 0 {
		a.Logger.Info("snapshots at shutdown: all written", "written", written, "took", took)
		return
	}
	a.Logger.Warn("snapshots at shutdown: some not written; those sessions load by their checkpoints, reading more of the stream",
		"written", written, "not_written", left, "took", took, "err", err)
}

// closeEach runs close on every store at once, and adds up what they
// wrote and left, keeping the first error.
func closeEach(sts []*store.Store, close func(*store.Store) (written, left int, err error)) (written, left int, err error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, st := range sts {
		wg.Go(func() {
			w, l, e := close(st)
			mu.Lock()
			written, left = written+w, left+l
			if e != nil && err == nil {
				err = e
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return written, left, err
}

// Snapshot reads a session's snapshot (store.SnapshotLoader), tried
// again as a checkpoint is (retryRead).
func (l *streamLoader) Snapshot(ctx context.Context, session string) ([]byte, bool, error) {
	if l.snaps == nil {
		return nil, false, nil
	}
	return retryRead(ctx, func(ctx context.Context) ([]byte, bool, error) {
		return l.snaps.Get(ctx, session)
	})
}

// SaveSnapshots writes snapshots (store.SnapshotLoader).
func (l *streamLoader) SaveSnapshots(ctx context.Context, snaps iter.Seq2[string, []byte]) (written, tooLarge int, err error) {
	if l.snaps == nil {
		return 0, 0, nil
	}
	return l.snaps.PutAll(ctx, snaps)
}

// StreamState reads the stream's identity and removed count as they
// are now (store.SnapshotLoader).
func (l *streamLoader) StreamState(ctx context.Context) (string, uint64, error) {
	return bus.StreamState(ctx, l.nc, l.stream)
}

// SaveSnapshots of a reader writes none.
func (readOnly) SaveSnapshots(context.Context, iter.Seq2[string, []byte]) (int, int, error) {
	return 0, 0, nil
}

// Behind the ingest, every IdleSnapshots, the ingest stores write the
// snapshots of the sessions that had no record for that long, up to
// idleSnapshotBudget bytes a round: after a crash, a session that had
// paused loads from its snapshot.
const idleSnapshotBudget = 32 << 20

// idleSnapshots is the goroutine that writes them.
type idleSnapshots struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startIdleSnapshots(a *App) *idleSnapshots {
	every := a.IdleSnapshots
	if every == 0 {
		every = DefaultIdleSnapshots
	}
	if every < 0 || a.loader == nil || a.loader.snaps == nil || a.removals == nil || !a.removals.Counted() {
		return nil
	}
	// Its round under way ends at stop, or at the app's end.
	ctx, cancel := context.WithCancel(a.life)
	w := &idleSnapshots{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			a.writeIdleSnapshots(ctx, every)
		}
	}()
	return w
}

func (w *idleSnapshots) stop() {
	if w == nil {
		return
	}
	w.cancel()
	<-w.done
}

// writeIdleSnapshots is one round of idleSnapshots.
func (a *App) writeIdleSnapshots(ctx context.Context, every time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, max(every, 5*time.Second))
	defer cancel()
	// The count first: a store fed after it was fed, and concerned by
	// the removals, when it was read (appliedRemovals).
	removed, ok := a.removals.Applied(ctx)
	if !ok {
		return
	}
	a.evictLabel.Store(&removed)
	sts := a.roles.IngestStores()
	if len(sts) == 0 {
		return
	}
	written := 0
	for _, st := range sts {
		n, err := st.WriteIdleSnapshots(ctx, a.loader.identity, removed, idleSnapshotBudget/len(sts))
		written += n
		if err != nil && ctx.Err() == nil {
			a.Logger.Warn("snapshots of idle sessions not written; written again at shutdown", "err", err)
		}
	}
	if written > 0 {
		if err := a.loader.snaps.MarkState(ctx, bus.SnapshotState{Stream: a.loader.identity, Removed: removed}); err != nil && ctx.Err() == nil {
			a.Logger.Warn("snapshots' state not written; the next start empties them", "err", err)
		}
		if now, _, err := bus.Removed(ctx, a.nc, a.stream); err == nil && now != removed {
			a.dropSnapshots()
		}
	}
}

// The stores write the snapshot of a session they evict (store.Store's
// EvictSnapshots) at the removed count evictLabel holds: one at which
// every removal was applied to the stores, read at start and by every
// round of idle snapshots, and cleared when a removal comes, until the
// next round. A store evicts with its locks held, so the count is read
// from there, never from the removals' watcher, which takes the stores'
// locks while it holds its own. A count older than the stream's is
// still one at which every removal was applied (a round that cannot say
// leaves it): its snapshots are never used, and cost only their writes.

// setEvictLabel reads the count at start, before any store is fed.
func (a *App) setEvictLabel() {
	if a.loader == nil || a.loader.snaps == nil || !a.removals.Counted() {
		return
	}
	removed := a.removals.Count()
	a.evictLabel.Store(&removed)
}

// evictSnapshotLabel is the stores' EvictSnapshots.
func (a *App) evictSnapshotLabel() (string, uint64, bool) {
	removed := a.evictLabel.Load()
	if removed == nil || a.life.Err() != nil {
		return "", 0, false
	}
	return a.loader.identity, *removed, true
}

// evictSnapshotsWritten is the stores' SnapshotsWritten: as after the
// idle snapshots, the bucket is marked written at removed, and emptied
// when a removal came meanwhile (a snapshot taken before it was applied,
// and written after the bucket was emptied, may hold what it removed).
func (a *App) evictSnapshotsWritten(ctx context.Context, removed uint64) {
	if a.removals.Count() != removed {
		a.dropSnapshots()
		return
	}
	if err := a.loader.snaps.MarkState(ctx, bus.SnapshotState{Stream: a.loader.identity, Removed: removed}); err != nil && ctx.Err() == nil {
		a.Logger.Warn("snapshots' state not written; the next start empties them", "err", err)
	}
}
