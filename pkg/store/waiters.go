package store

import (
	"container/heap"
	"context"
	"fmt"
	"time"
)

// Applied returns the watermark: every stream sequence up to it has been
// applied or rejected.
func (s *Store) Applied() uint64 { return s.applied.Load() }

// Advance moves the watermark to seq, when that is forward, and wakes the
// readers waiting for it. The ingest calls it for every stream sequence it
// has dealt with, in order.
func (s *Store) Advance(seq uint64) {
	for {
		cur := s.applied.Load()
		if seq <= cur {
			return
		}
		if s.applied.CompareAndSwap(cur, seq) {
			break
		}
	}
	if seq < s.nextWake.Load() {
		return
	}
	s.waitMu.Lock()
	for len(s.waiters) > 0 && s.waiters[0].seq <= seq {
		w := heap.Pop(&s.waiters).(*waiter)
		close(w.done)
	}
	s.updateNextWake()
	s.waitMu.Unlock()
}

func (s *Store) updateNextWake() {
	if len(s.waiters) == 0 {
		s.nextWake.Store(^uint64(0))
	} else {
		s.nextWake.Store(s.waiters[0].seq)
	}
}

// Wait returns once every stream sequence up to seq has been applied, or
// ErrWaitExpired after timeout, or the context's error. It returns at once
// when the store is already there.
func (s *Store) Wait(ctx context.Context, seq uint64, timeout time.Duration) error {
	if s.applied.Load() >= seq {
		return nil
	}
	if timeout <= 0 {
		return ErrWaitExpired
	}
	w := &waiter{seq: seq, done: make(chan struct{})}
	s.waitMu.Lock()
	heap.Push(&s.waiters, w)
	s.updateNextWake()
	// Advance stores the watermark, then reads nextWake without the lock;
	// this reads the watermark after storing nextWake. One of the two sees
	// the other's store, so a wake-up is never lost: checked before the
	// push instead, an Advance in between would see no waiter and this
	// would see the old watermark.
	if s.applied.Load() >= seq {
		heap.Remove(&s.waiters, w.index)
		s.updateNextWake()
		s.waitMu.Unlock()
		return nil
	}
	s.waitMu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	s.waitMu.Lock()
	if w.index >= 0 {
		heap.Remove(&s.waiters, w.index)
		s.updateNextWake()
	}
	s.waitMu.Unlock()
	select {
	case <-w.done:
		return nil // woken while timing out: the answer is ready
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: at %d, waiting for %d", ErrWaitExpired, s.applied.Load(), seq)
}

type waiter struct {
	seq   uint64
	done  chan struct{}
	index int
}

type waiterHeap []*waiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}
