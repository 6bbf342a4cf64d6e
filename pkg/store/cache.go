package store

import (
	"container/list"
	"sync"
	"sync/atomic"
)

// cache is the set of loaded projections, in order of use, and their
// count and estimated size. Its lock guards the order; a slot's
// projection is guarded by the slot's lock. A slot's lock comes first
// when both are held: eviction, which holds the cache's lock, only tries
// a slot's lock and passes over a slot in use.
type cache struct {
	n         atomic.Int64 // sessions loaded
	bytes     atomic.Int64 // their estimated size
	loads     atomic.Uint64
	snapLoads atomic.Uint64 // loads that started from a snapshot
	evictions atomic.Uint64
	moves     atomic.Uint64 // slots put at the back so far

	mu  sync.Mutex
	lru list.List // of *slot, the least recently used first
}

// add counts a slot whose projection was just loaded, as the most
// recently used; the slot is locked.
func (c *cache) add(sl *slot) {
	c.n.Add(1)
	c.bytes.Add(sl.size)
	c.mu.Lock()
	sl.elem = c.lru.PushBack(sl)
	sl.moved = c.moves.Add(1)
	c.mu.Unlock()
}

// touch makes a loaded slot the most recently used; the slot is locked.
// A slot put at the back less than half the cache ago stays where it is,
// and the lock is not taken: the ingest touches the same few sessions
// over and over. So the order is that of use to within half the cache:
// eviction, which takes from the front, passes over every slot used since
// it was last in the older half.
func (c *cache) touch(sl *slot) {
	if c.moves.Load()-sl.moved < uint64(c.n.Load()/2) {
		return
	}
	c.mu.Lock()
	if sl.elem != nil {
		c.lru.MoveToBack(sl.elem)
		sl.moved = c.moves.Add(1)
	}
	c.mu.Unlock()
}

// grow accounts for a loaded slot's size changing by delta.
func (c *cache) grow(delta int64) { c.bytes.Add(delta) }

// drop unloads a slot's projection; the slot is locked.
func (c *cache) drop(sl *slot) {
	if sl.proj == nil {
		return
	}
	c.mu.Lock()
	c.dropLocked(sl)
	c.mu.Unlock()
}

func (c *cache) dropLocked(sl *slot) {
	if sl.elem != nil {
		c.lru.Remove(sl.elem)
		sl.elem = nil
	}
	sl.proj = nil
	c.n.Add(-1)
	c.bytes.Add(-sl.size - sl.held)
	sl.size, sl.held = 0, 0
}

// over reports whether the cache is over either bound.
func (c *cache) over(maxSessions int, maxBytes int64) bool {
	return c.n.Load() > int64(maxSessions) || c.bytes.Load() > maxBytes
}

// evict unloads the least recently used projections while the cache is
// over either bound, down to 90% of it so that evictions come in
// batches. It takes them from the front of the order: a pass costs what
// it evicts, not what the cache holds. gone, when not nil, is called with
// each slot it evicts, locked, before its projection is dropped.
func (c *cache) evict(maxSessions int, maxBytes int64, gone func(sl *slot)) {
	if !c.over(maxSessions, maxBytes) {
		return
	}
	wantN, wantB := int64(maxSessions)*9/10, maxBytes*9/10
	c.mu.Lock()
	defer c.mu.Unlock()
	for tries := c.lru.Len(); tries > 0 && (c.n.Load() > wantN || c.bytes.Load() > wantB); tries-- {
		e := c.lru.Front()
		sl := e.Value.(*slot)
		if !sl.mu.TryLock() {
			c.lru.MoveToBack(e) // in use: as good as used
			continue
		}
		if gone != nil {
			gone(sl)
		}
		c.dropLocked(sl)
		sl.mu.Unlock()
		c.evictions.Add(1)
	}
}
