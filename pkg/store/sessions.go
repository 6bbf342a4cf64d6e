package store

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"
)

// directory is the set of sessions the store knows, each by its slot, and
// the forgetting of those it need not keep. It forgets like a clock: a
// pass goes round the slots from its hand, gives a slot used since the
// previous pass a second chance, and forgets the others that may be
// forgotten, until the directory is back under 90% of its bound.
//
// Its lock guards the map and the order. A slot's lock comes first when
// both are held: a pass takes slots from the order under the directory's
// lock, then only tries each slot's lock, without the directory's, and
// passes over a slot in use.
type directory struct {
	n      atomic.Int64 // slots held
	credit atomic.Int64 // slots met and checkpoints written since the last pass
	// forgot says a slot with records was forgotten: a session met since
	// may have had records before.
	forgot atomic.Bool
	passMu sync.Mutex // one pass at a time

	mu    sync.RWMutex
	slots map[string]*slot
	clock list.List // of *slot; the hand is at the front
	// missed holds the sessions a load found without records, until when
	// that answer may be given again without a read (misses.go). Adding
	// a slot for a session deletes its entry, in the same critical
	// section.
	missed map[string]time.Time
}

func (d *directory) init() { d.slots, d.missed = map[string]*slot{}, map[string]time.Time{} }

func (d *directory) get(session string) *slot {
	d.mu.RLock()
	sl := d.slots[session]
	d.mu.RUnlock()
	return sl
}

// getOrAdd returns the session's slot, adding one set up by setup, under
// the directory's lock, when there is none.
func (d *directory) getOrAdd(session string, setup func(sl *slot)) *slot {
	if sl := d.get(session); sl != nil {
		return sl
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	sl := d.slots[session]
	if sl == nil {
		sl = &slot{id: session}
		if len(d.missed) > 0 {
			delete(d.missed, session)
		}
		setup(sl)
		sl.hand = d.clock.PushBack(sl)
		d.slots[session] = sl
		d.n.Add(1)
		d.credit.Add(1)
	}
	return sl
}

// remove takes a slot out; the slot is locked. A later Apply or View of
// its session finds it dead and adds a new one.
func (d *directory) remove(sl *slot) {
	d.mu.Lock()
	d.removeLocked(sl)
	d.mu.Unlock()
}

func (d *directory) removeLocked(sl *slot) {
	if d.slots[sl.id] == sl {
		delete(d.slots, sl.id)
		d.clock.Remove(sl.hand)
		d.n.Add(-1)
	}
	sl.hand, sl.dead = nil, true
}

// ids returns the sessions known.
func (d *directory) ids() []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	ids := make([]string, 0, len(d.slots))
	for id := range d.slots {
		ids = append(ids, id)
	}
	return ids
}

// all returns the slots held.
func (d *directory) all() []*slot {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]*slot, 0, len(d.slots))
	for _, sl := range d.slots {
		out = append(out, sl)
	}
	return out
}

// sweepChunk bounds the slots a pass takes from the clock at once, under
// the directory's lock.
const sweepChunk = 64

// sweep forgets slots while more than 90% of max are held, going round
// the slots at most once. forget is called with a slot locked that was
// not used since the previous pass; it reports whether the slot may be
// forgotten, and lets go of what the slot holds elsewhere when it may.
//
// A pass holds the directory's lock only to take the next few slots
// from the hand, moving them behind it, and to remove a slot it
// forgets: lookups go on while it looks at the slots.
func (d *directory) sweep(max int, forget func(sl *slot) bool) {
	if !d.passMu.TryLock() {
		return // a pass is running
	}
	defer d.passMu.Unlock()
	d.credit.Store(0)
	want := int64(max * 9 / 10)
	d.mu.RLock()
	tries := d.clock.Len()
	d.mu.RUnlock()
	next := make([]*slot, 0, sweepChunk)
	for tries > 0 && d.n.Load() > want {
		// As many as the pass may forget: it stops once under want.
		n := min(tries, sweepChunk, int(d.n.Load()-want))
		next = next[:0]
		d.mu.Lock()
		for range min(n, d.clock.Len()) {
			e := d.clock.Front()
			d.clock.MoveToBack(e)
			next = append(next, e.Value.(*slot))
		}
		d.mu.Unlock()
		if len(next) == 0 {
			return
		}
		tries -= len(next)
		for _, sl := range next {
			if !sl.mu.TryLock() {
				continue // in use
			}
			switch {
			case sl.dead:
			case sl.recent || !forget(sl):
				sl.recent = false
			default:
				d.mu.Lock()
				d.forgot.Store(true)
				d.removeLocked(sl)
				d.mu.Unlock()
			}
			sl.mu.Unlock()
		}
	}
}
