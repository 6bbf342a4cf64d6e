package store

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"sync"
	"time"
)

// BatchSaver is a Loader that stores many checkpoints at once, faster than
// one SaveCheckpoint each. Package bus pipelines them.
type BatchSaver interface {
	// SaveCheckpoints stores the checkpoints before returning. On an
	// error, some of them may be stored.
	SaveCheckpoints(ctx context.Context, cps iter.Seq2[string, Checkpoint]) error
}

// ErrClosed is returned by SaveCheckpoints after Close.
var ErrClosed = errors.New("store: closed")

// Retry waits of the checkpoint writer after a failed write.
const (
	firstRetry = 100 * time.Millisecond
	maxRetry   = 5 * time.Second
)

// checkpointWriter writes checkpoints behind the ingest: Apply hands it a
// session's checkpoint and goes on. It keeps the latest checkpoint of
// each session until it is written, writes what it holds in one batch,
// and writes a failed batch again, waiting longer each time. Its
// goroutine runs while there is something to write; close stops it.
//
// A checkpoint is a hint: one written late, or never, only makes a load
// read more records.
type checkpointWriter struct {
	write func(ctx context.Context, batch map[string]Checkpoint) error
	// written is told of every batch written, and whether nothing is
	// left to write.
	written func(batch map[string]Checkpoint, idle bool)
	logger  func() *slog.Logger

	ctx    context.Context // ended by close: ends the write in hand
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending map[string]Checkpoint
	running bool
	idle    chan struct{} // closed when the goroutine running stops
	closed  bool
	lastErr error // of the latest write, nil once one succeeds
}

func (w *checkpointWriter) init() {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.pending = map[string]Checkpoint{}
}

// put queues a session's checkpoint in place of an older one. A load
// calls it with its slot locked: the writer takes no slot's lock while it
// holds its own.
func (w *checkpointWriter) put(session string, cp Checkpoint) {
	w.putAll(func(yield func(string, Checkpoint) bool) { yield(session, cp) })
}

// putAll queues checkpoints at once: they are written together.
func (w *checkpointWriter) putAll(cps iter.Seq2[string, Checkpoint]) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	for id, cp := range cps {
		if old, ok := w.pending[id]; !ok || old.Seq <= cp.Seq {
			w.pending[id] = cp
		}
	}
	if !w.running && len(w.pending) > 0 {
		w.running, w.idle = true, make(chan struct{})
		w.wg.Add(1)
		go w.run()
	}
}

func (w *checkpointWriter) run() {
	defer w.wg.Done()
	wait := time.Duration(0)
	for {
		w.mu.Lock()
		if len(w.pending) == 0 || w.closed {
			w.running = false
			close(w.idle)
			w.mu.Unlock()
			return
		}
		batch := w.pending
		w.pending = make(map[string]Checkpoint, len(batch))
		w.mu.Unlock()

		err := w.write(w.ctx, batch)
		w.mu.Lock()
		w.lastErr = err
		idle := len(w.pending) == 0
		if err != nil {
			for id, cp := range batch {
				if old, ok := w.pending[id]; !ok || old.Seq < cp.Seq {
					w.pending[id] = cp
				}
			}
		}
		w.mu.Unlock()
		if err == nil {
			wait = 0
			w.written(batch, idle)
			continue
		}
		wait = min(max(2*wait, firstRetry), maxRetry)
		w.logger().Warn("checkpoints not written; trying again", "checkpoints", len(batch), "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
		}
	}
}

// flush returns once nothing is left to write, or with the context's
// error and the latest write's.
func (w *checkpointWriter) flush(ctx context.Context) error {
	for {
		w.mu.Lock()
		closed, running, idle, lastErr := w.closed, w.running, w.idle, w.lastErr
		w.mu.Unlock()
		switch {
		case closed:
			return ErrClosed
		case !running:
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("store: checkpoints not written: %w (last write: %w)", ctx.Err(), lastErr)
			}
			return fmt.Errorf("store: checkpoints not written: %w", ctx.Err())
		}
	}
}

// close stops the writer, ending the write in hand; what is not written
// by then is dropped. It returns how many checkpoints were dropped.
func (w *checkpointWriter) close() int {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return 0
	}
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.pending)
	w.pending = nil
	return n
}

// writeCheckpoints writes a batch through the Loader, within SaveTimeout.
func (s *Store) writeCheckpoints(ctx context.Context, batch map[string]Checkpoint) error {
	ctx, cancel := context.WithTimeout(ctx, s.SaveTimeout)
	defer cancel()
	if bs, ok := s.Loader.(BatchSaver); ok {
		return bs.SaveCheckpoints(ctx, maps.All(batch))
	}
	var errs []error
	for id, cp := range batch {
		if err := s.Loader.SaveCheckpoint(ctx, id, cp); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// SaveCheckpoints writes the checkpoint of every session whose latest
// compaction is known, with those waiting to be written, so the next
// start loads each from there; it returns once they are written, or with
// the context's error.
func (s *Store) SaveCheckpoints(ctx context.Context) error {
	if s.Loader == nil {
		return nil
	}
	cps := map[string]Checkpoint{}
	for _, sl := range s.dir.all() {
		sl.mu.Lock()
		if sl.fromKnown && !sl.dead {
			cps[sl.id] = Checkpoint{From: sl.from, Seq: sl.seq}
		}
		sl.mu.Unlock()
	}
	s.checkpoints.putAll(maps.All(cps))
	return s.checkpoints.flush(ctx)
}

// Close stops the checkpoint writer; checkpoints not written by then are
// dropped (call SaveCheckpoints first to write them). The store still
// applies and serves.
func (s *Store) Close() error {
	if n := s.checkpoints.close(); n > 0 {
		s.Logger.Warn("checkpoints dropped at close; those sessions load from earlier ones", "checkpoints", n)
	}
	return nil
}
