package store

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// watermark is the stream sequence up to which every record has been
// applied or rejected, and the readers waiting for it to reach theirs. A
// reader waiting holds no other lock of the store.
type watermark struct {
	applied atomic.Uint64

	waitMu   sync.Mutex // guards waiters
	waiters  waiterHeap
	nextWake atomic.Uint64 // smallest sequence a waiter needs; MaxUint64 if none
}

func (w *watermark) init() { w.nextWake.Store(^uint64(0)) }

func (w *watermark) get() uint64 { return w.applied.Load() }

// advance moves the watermark to seq, when that is forward, and wakes the
// waiters it reaches.
func (w *watermark) advance(seq uint64) {
	for {
		cur := w.applied.Load()
		if seq <= cur {
			return
		}
		if w.applied.CompareAndSwap(cur, seq) {
			break
		}
	}
	if seq < w.nextWake.Load() {
		return
	}
	w.waitMu.Lock()
	for len(w.waiters) > 0 && w.waiters[0].seq <= seq {
		wt := heap.Pop(&w.waiters).(*waiter)
		close(wt.done)
	}
	w.updateNextWake()
	w.waitMu.Unlock()
}

func (w *watermark) updateNextWake() {
	if len(w.waiters) == 0 {
		w.nextWake.Store(^uint64(0))
	} else {
		w.nextWake.Store(w.waiters[0].seq)
	}
}

// wait is Store.Wait.
func (w *watermark) wait(ctx context.Context, seq uint64, timeout time.Duration) error {
	if w.applied.Load() >= seq {
		return nil
	}
	if timeout <= 0 {
		return ErrWaitExpired
	}
	wt := &waiter{seq: seq, done: make(chan struct{})}
	w.waitMu.Lock()
	heap.Push(&w.waiters, wt)
	w.updateNextWake()
	// advance stores the watermark, then reads nextWake without the lock;
	// this reads the watermark after storing nextWake. One of the two sees
	// the other's store, so a wake-up is never lost: checked before the
	// push instead, an advance in between would see no waiter and this
	// would see the old watermark.
	if w.applied.Load() >= seq {
		heap.Remove(&w.waiters, wt.index)
		w.updateNextWake()
		w.waitMu.Unlock()
		return nil
	}
	w.waitMu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-wt.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	w.waitMu.Lock()
	if wt.index >= 0 {
		heap.Remove(&w.waiters, wt.index)
		w.updateNextWake()
	}
	w.waitMu.Unlock()
	select {
	case <-wt.done:
		return nil // woken while timing out: the answer is ready
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: at %d, waiting for %d", ErrWaitExpired, w.applied.Load(), seq)
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
	wt := x.(*waiter)
	wt.index = len(*h)
	*h = append(*h, wt)
}
func (h *waiterHeap) Pop() any {
	old := *h
	wt := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	wt.index = -1
	return wt
}
