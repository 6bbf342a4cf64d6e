package store

import "time"

// Misses: a request for a session with no records costs a checkpoint
// lookup and a read of the session's subject, every time. Unknown
// sessions are what a careless or hostile client asks for most, so the
// store remembers for MissTTL that a load found none, and answers "no
// records" from that without reading.
//
// Remembering must never hide a record. A miss is kept only while the
// session has no slot, and a slot is added, deleting the miss under the
// directory's lock, for every record the ingest meets. So for a reader
// who waited for the watermark to pass min_seq, each record of the
// session up to min_seq is either one the load read the stream for (up
// to the watermark when it started: it found none), or one the ingest
// applied before moving the watermark past it, which deleted the miss.
// The load records the miss while it still holds the session's locked
// slot, before it removes the slot: an Apply that races it either finds
// that slot (and waits for it, finds it removed, adds a new one and
// deletes the miss) or finds none and adds one.

// maxMisses bounds the sessions remembered as missing; past it the
// expired ones are dropped, and if none are, no more are remembered
// until some expire.
const maxMisses = 100_000

// missed reports whether the session is remembered as having no records
// and has no slot.
func (d *directory) missedAt(session string, now time.Time) bool {
	d.mu.RLock()
	until, ok := d.missed[session]
	_, held := d.slots[session]
	d.mu.RUnlock()
	return ok && !held && now.Before(until)
}

// removeMissed removes a slot a load found without records, and
// remembers the session as missing until then. The slot is locked.
func (d *directory) removeMissed(sl *slot, until time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removeLocked(sl)
	if len(d.missed) >= maxMisses {
		now := time.Now()
		for id, t := range d.missed {
			if !now.Before(t) {
				delete(d.missed, id)
			}
		}
		if len(d.missed) >= maxMisses {
			return
		}
	}
	d.missed[sl.id] = until
}
