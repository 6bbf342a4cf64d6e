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
	// SaveCheckpoints stores the checkpoints before returning, never one
	// in place of a newer one, as SaveCheckpoint. On an error, some of
	// them may be stored.
	SaveCheckpoints(ctx context.Context, cps iter.Seq2[string, Checkpoint]) error
}

// ErrClosed is returned by SaveCheckpoints after Close.
var ErrClosed = errors.New("store: closed")

// Retry waits of the checkpoint writer after a failed write.
const (
	firstRetry = 100 * time.Millisecond
	maxRetry   = 5 * time.Second
)

// DefaultIndexEvery is how often a session's record sequences are
// written with its checkpoint, at most, while records come.
const DefaultIndexEvery = time.Second

// checkpointWriter writes checkpoints behind the ingest: Apply hands it a
// session's checkpoint and goes on. It keeps the latest checkpoint of
// each session until it is written, writes what it holds in one batch,
// and writes a failed batch again, waiting longer each time. Its
// goroutine runs while there is something to write; close stops it.
//
// A session whose record index grew is only marked: at most every
// `every`, the writer asks the store for the marked sessions'
// checkpoints, with their sequences (resolve), and writes them in the
// same batch as the others. So a session that gets many records is
// written once an interval, not once a record, and a flush writes what
// is marked at once.
//
// A checkpoint is a hint: one written late, or never, only makes a load
// read more records.
type checkpointWriter struct {
	write func(ctx context.Context, batch map[string]Checkpoint) error
	// resolve returns the current checkpoints of marked sessions; it
	// takes their slots' locks, so the writer calls it holding none.
	resolve func(ids map[string]struct{}) map[string]Checkpoint
	every   time.Duration
	// written is told of every batch written, and whether nothing is
	// left to write.
	written func(batch map[string]Checkpoint, idle bool)
	logger  func() *slog.Logger

	ctx    context.Context // ended by close: ends the write in hand
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending map[string]Checkpoint
	dirty   map[string]struct{} // marked: written once resolved
	last    time.Time           // when marked sessions were last resolved
	hurry   bool                // a flush waits: resolve the marked now
	wake    chan struct{}       // ends the wait for the next resolve
	running bool
	idle    chan struct{} // closed when the goroutine running stops
	closed  bool
	lastErr error // of the latest write, nil once one succeeds
	wrote   int   // checkpoints written, in all
}

func (w *checkpointWriter) init() {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.pending = map[string]Checkpoint{}
	w.dirty = map[string]struct{}{}
	w.wake = make(chan struct{}, 1)
	w.last = time.Now()
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
		if old, ok := w.pending[id]; !ok || !old.Newer(cp) {
			w.pending[id] = cp
		}
	}
	w.start()
}

// mark notes that a session's checkpoint changed: its index grew. The
// writer asks for the checkpoint when it next resolves.
func (w *checkpointWriter) mark(session string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.dirty[session] = struct{}{}
	w.start()
}

// start starts the goroutine when it is not running; w.mu is held.
func (w *checkpointWriter) start() {
	if !w.running && (len(w.pending) > 0 || len(w.dirty) > 0) {
		w.running, w.idle = true, make(chan struct{})
		w.wg.Add(1)
		go w.run()
	}
}

// take returns what the writer writes next: the pending checkpoints, and
// the marked sessions when they are due. With nothing to write yet, it
// returns how long to wait for the marked ones; done says the goroutine
// stops. w.mu is held.
func (w *checkpointWriter) take() (batch map[string]Checkpoint, marked map[string]struct{}, wait time.Duration, done bool) {
	if w.closed || len(w.pending) == 0 && len(w.dirty) == 0 {
		w.running, w.hurry = false, false
		close(w.idle)
		return nil, nil, 0, true
	}
	if len(w.dirty) > 0 {
		if due := w.every - time.Since(w.last); w.hurry || due <= 0 {
			marked, w.dirty, w.last = w.dirty, map[string]struct{}{}, time.Now()
		} else if len(w.pending) == 0 {
			return nil, nil, due, false
		}
	}
	batch, w.pending = w.pending, map[string]Checkpoint{}
	return batch, marked, 0, false
}

func (w *checkpointWriter) run() {
	defer w.wg.Done()
	wait := time.Duration(0)
	for {
		w.mu.Lock()
		batch, marked, due, done := w.take()
		w.mu.Unlock()
		if done {
			return
		}
		if batch == nil {
			t := time.NewTimer(due)
			select {
			case <-t.C:
			case <-w.wake:
			case <-w.ctx.Done():
			}
			t.Stop()
			continue
		}
		if len(marked) > 0 {
			for id, cp := range w.resolve(marked) {
				if old, ok := batch[id]; !ok || !old.Newer(cp) {
					batch[id] = cp
				}
			}
		}
		if len(batch) == 0 {
			continue
		}

		err := w.writeChunks(batch)
		if err == nil {
			wait = 0
			continue
		}
		wait = min(max(2*wait, firstRetry), maxRetry)
		if w.ctx.Err() != nil {
			continue // closed: close counts what is left
		}
		w.logger().Warn("checkpoints not written; trying again", "checkpoints", len(batch), "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
		}
	}
}

// writeChunks writes a batch in parts of at most writeChunk checkpoints,
// so that a write cut short (by an error, or by close) leaves only the
// parts not written to count and to write again. What it wrote it
// deletes from batch; on an error it puts what is left back in pending.
func (w *checkpointWriter) writeChunks(batch map[string]Checkpoint) error {
	for len(batch) > 0 {
		chunk := batch
		if len(batch) > writeChunk {
			chunk = make(map[string]Checkpoint, writeChunk)
			for id, cp := range batch {
				chunk[id] = cp
				if len(chunk) == writeChunk {
					break
				}
			}
		}
		err := w.write(w.ctx, chunk)
		w.mu.Lock()
		w.lastErr = err
		if err != nil {
			for id, cp := range batch {
				if old, ok := w.pending[id]; !ok || cp.Newer(old) {
					w.pending[id] = cp
				}
			}
			w.mu.Unlock()
			return err
		}
		w.wrote += len(chunk)
		if len(chunk) < len(batch) {
			for id := range chunk {
				delete(batch, id)
			}
		} else {
			batch = nil
		}
		idle := len(batch) == 0 && len(w.pending) == 0 && len(w.dirty) == 0
		w.mu.Unlock()
		w.written(chunk, idle)
	}
	return nil
}

// writeChunk is the most checkpoints the writer writes in one call.
const writeChunk = 4096

// flush returns once nothing is left to write, or with the context's
// error and the latest write's.
func (w *checkpointWriter) flush(ctx context.Context) error {
	for {
		w.mu.Lock()
		closed, running, idle, lastErr := w.closed, w.running, w.idle, w.lastErr
		if running {
			w.hurry = true
		}
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
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
	n := len(w.pending) + len(w.dirty)
	w.pending, w.dirty = nil, nil
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
	s.queueAll()
	return s.checkpoints.flush(ctx)
}

// queueAll queues the checkpoint of every session whose latest compaction
// is known and whose checkpoint changed since it was last written.
func (s *Store) queueAll() {
	cps := map[string]Checkpoint{}
	for _, sl := range s.dir.all() {
		sl.mu.Lock()
		if sl.fromKnown && !sl.dead && (sl.saved != sl.from || sl.savedSeq != sl.seq || sl.marked) {
			cps[sl.id] = s.checkpointOf(sl)
			sl.marked = false
		}
		sl.mu.Unlock()
	}
	s.checkpoints.putAll(maps.All(cps))
}

// CloseCheckpoints writes the checkpoints SaveCheckpoints writes until
// ctx ends, then stops the checkpoint writer, as Close does: it is what
// a store does at shutdown. It returns how many checkpoints the writer
// wrote meanwhile and how many it did not: those sessions load from an
// earlier checkpoint, or from their first record, reading more of the
// stream (a checkpoint is a hint). err is the latest write's error, when
// some were not written.
func (s *Store) CloseCheckpoints(ctx context.Context) (written, left int, err error) {
	s.checkpoints.mu.Lock()
	before := s.checkpoints.wrote
	s.checkpoints.mu.Unlock()
	if s.Loader != nil {
		s.queueAll()
		err = s.checkpoints.flush(ctx)
	}
	left = s.checkpoints.close()
	s.checkpoints.mu.Lock()
	written = s.checkpoints.wrote - before
	if left > 0 && s.checkpoints.lastErr != nil {
		err = s.checkpoints.lastErr
	} else if left == 0 {
		err = nil
	}
	s.checkpoints.mu.Unlock()
	return written, left, err
}

// Close stops the checkpoint writer; checkpoints not written by then are
// dropped (call SaveCheckpoints first to write them). The store still
// applies and serves.
func (s *Store) Close() error {
	s.evictSnaps.close()
	if n := s.checkpoints.close(); n > 0 {
		s.Logger.Warn("checkpoints dropped at close; those sessions load from earlier ones", "checkpoints", n)
	}
	return nil
}
