package store

import (
	"errors"
	"slices"
)

// ErrQuarantined marks a record that decodes but is never applied: it
// would take its session past the session bound, or applying it failed.
// Its text starts the reason the rejected list gives, so it names no
// package.
var ErrQuarantined = errors.New("quarantined")

// errPanicked: applying the record failed, the projection may be
// half-changed.
var errPanicked = errors.New("applying it failed")

// quarantined is a record of a session that is never applied. Each slot
// keeps its own since its latest compaction (a load never reads further
// back) and lets them go with the slot.
type quarantined struct {
	seq uint64
	// panicked says applying it failed. A record past the session bound
	// is found again by any load (Limits.Weigh decides it from the
	// records alone); one that failed is kept, and its slot with it.
	panicked bool
}

// isQuarantined reports whether the slot's record seq is quarantined.
func (sl *slot) isQuarantined(seq uint64) bool {
	for _, q := range sl.quarantined {
		if q.seq == seq {
			return true
		}
	}
	return false
}

// pinned reports whether the slot holds a record quarantined for failing.
func (sl *slot) pinned() bool {
	for _, q := range sl.quarantined {
		if q.panicked {
			return true
		}
	}
	return false
}

// quarantine adds what a load quarantined to the slot and reports the
// records the slot did not know of. The slot is locked.
func (s *Store) quarantine(sl *slot, found []quarantined, why []Rejection) {
	for i, q := range found {
		if sl.isQuarantined(q.seq) {
			continue
		}
		s.reject(why[i])
		if q.seq >= sl.from { // none before is read again
			sl.quarantined = append(sl.quarantined, q)
		}
	}
	slices.SortFunc(sl.quarantined, func(a, b quarantined) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
}
