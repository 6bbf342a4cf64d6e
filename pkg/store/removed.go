package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// Records removed from the stream (an operator's purge, or deletion of a
// message) leave what the store holds of their session wrong: its
// projection holds them, its record index names them, its latest
// compaction may be one of them, and records applied after would be
// mixed with them. The store cannot see a removal; whoever learns of
// one tells it, and it forgets what it held of the sessions concerned:
// the next reader loads them from the stream, which holds only what
// remains. Their checkpoints are hints a load checks (load.go): one that
// names a removed record is not used.

// Forget drops what the store holds of a session's records: its
// projection, its index, its latest compaction and its quarantined
// records. It keeps the sequence of the last record it saw, so records
// delivered again are still known. A load in progress reads again: what
// it read may hold removed records. A store without a Loader, which has
// nothing to load from, keeps everything.
func (s *Store) Forget(session string) {
	s.removalApplied()
	if sl := s.dir.get(session); sl != nil {
		s.forgetSlot(sl)
	}
}

// ForgetAll forgets every session (Forget): when the records removed
// are not known, or are of many sessions.
func (s *Store) ForgetAll() {
	s.removalApplied()
	for _, sl := range s.dir.all() {
		s.forgetSlot(sl)
	}
}

// ForgetHolding forgets every session that may hold the record seq: one
// whose last record seen is at or past it, or being loaded (its read
// may have met it).
func (s *Store) ForgetHolding(seq uint64) {
	s.removalApplied()
	if seq > s.delivered.Load() && !s.byCatch.Load() {
		// Not delivered yet: whichever session it is of, it is not
		// applied when it comes (Apply looks under the slot's lock,
		// after this is noted and before the slots are looked at).
		s.way.drop(seq)
	}
	for _, sl := range s.dir.all() {
		sl.mu.Lock()
		holds := sl.seq >= seq || sl.loading != nil
		sl.mu.Unlock()
		if holds {
			s.forgetSlot(sl)
		}
	}
}

func (s *Store) forgetSlot(sl *slot) {
	if s.Loader == nil {
		return
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.dead {
		return
	}
	s.cache.drop(sl)
	s.dropIndex(sl)
	sl.from, sl.fromKnown, sl.saved = 0, false, 0
	sl.quarantined = nil
	if ld := sl.loading; ld != nil {
		ld.forgotten = true
	}
}

// Records on their way. An ingest, or a follower, applies a record some
// time after it was stored (the store's delivered sequence is the
// latest Apply was given; after a restart the watermark starts at the
// stream's end, above a backlog still to be delivered): a removal may take records stored but not
// delivered yet, and be applied to the store (Forget) before they come.
// A load after it reads the stream as it is, without them; applied when
// they come, they would sit in the session beside what the load read,
// though the stream holds them no more. So after a removal, until the
// store has applied every record stored before it, a load reads the
// session up to the stream's end, read after the removal (Prover's
// StreamLast), and its slot notes every record up to there as met: one
// that comes later was removed, and Apply finds it seen. The stream's
// end is read once for the loads after a removal. A Loader that is not
// a Prover has no such end to read up to; a store that Catch feeds (a
// reader's) has nothing on its way.
//
// A record deleted by sequence (ForgetHolding) that the store has not
// applied yet may be of a session loaded before: it is noted, and not
// applied when it comes.
type onTheirWay struct {
	mu      sync.Mutex
	gen     uint64 // removals applied
	pending bool   // records stored before a removal may be on their way
	until   uint64 // the stream's end read after the latest removal; 0: not read
	deleted map[uint64]struct{}
	n       atomic.Int64 // len(deleted)
}

// drop notes a record deleted before the store applied it.
func (w *onTheirWay) drop(seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deleted == nil {
		w.deleted = map[uint64]struct{}{}
	}
	w.deleted[seq] = struct{}{}
	w.n.Store(int64(len(w.deleted)))
}

// dropped reports whether the record seq, about to be applied, was
// deleted before it came; it forgets the deletions below seq, whose
// records will not come (the records come in stream order).
func (w *onTheirWay) dropped(seq uint64) bool {
	if w.n.Load() == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.deleted[seq]
	for d := range w.deleted {
		if d <= seq {
			delete(w.deleted, d)
		}
	}
	w.n.Store(int64(len(w.deleted)))
	return ok
}

// removalApplied notes a removal applied to the store.
func (s *Store) removalApplied() {
	s.way.mu.Lock()
	s.way.gen++
	s.way.pending, s.way.until = true, 0
	s.way.mu.Unlock()
}

// wayEnd returns the sequence a load reads up to, past the watermark,
// for records a removal took that may be on their way: the stream's end
// read after the latest removal, or 0 when the store has applied every
// record stored before it.
func (s *Store) wayEnd(ctx context.Context, pv Prover) (uint64, error) {
	if pv == nil || s.byCatch.Load() {
		return 0, nil // nothing reaches a store Catch feeds on its way
	}
	s.way.mu.Lock()
	if !s.way.pending {
		s.way.mu.Unlock()
		return 0, nil
	}
	if until := s.way.until; until != 0 {
		if s.delivered.Load() >= until {
			s.way.pending = false
			until = 0
		}
		s.way.mu.Unlock()
		return until, nil
	}
	gen := s.way.gen
	s.way.mu.Unlock()
	end, err := pv.StreamLast(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the stream's end after a removal: %w", err)
	}
	s.way.mu.Lock()
	if s.way.gen == gen && s.way.until == 0 {
		s.way.until = end
	}
	s.way.mu.Unlock()
	return end, nil
}
