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

// quarantined is a record of a session that a load does not apply.
type quarantined struct {
	seq uint64
	// panicked says applying it failed. A record past the session bound
	// is found again by any load (Limits.Weigh decides it from the
	// records alone); one that failed is kept by its slot, and its slot
	// with it.
	panicked bool
}

// pinned reports whether the slot holds a record quarantined for failing.
func (sl *slot) pinned() bool { return len(sl.quarantined) > 0 }

// quarantine reports what a load quarantined (the rejected list holds
// each record once) and adds the records that failed to the slot. The
// slot is locked.
func (s *Store) quarantine(sl *slot, found []quarantined, why []Rejection) {
	for i, q := range found {
		s.reject(why[i])
		if !q.panicked || q.seq < sl.from { // none before is read again
			continue
		}
		if at, ok := slices.BinarySearch(sl.quarantined, q.seq); !ok {
			sl.quarantined = slices.Insert(sl.quarantined, at, q.seq)
		}
	}
}
