package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/ctxd/ctxd/pkg/projection"
)

// Catch brings a session up to its record last, for a store that no
// ingest feeds: an instance that does not hold the ingest answers from
// such a store, after it proved from the stream that last is the
// session's latest record up to the sequence a request needs.
//
// A loaded projection reads the session's records after its own up to
// last, in order, and applies them; one not loaded only notes last, so
// its load reads up to it. Either way, a View after Catch shows the
// session with every one of its records up to last, or later ones,
// unless the store forgot the session in between (past MaxKnown): ViewAtChecked
// does both, and catches up again then.
//
// The records are read with the session's lock held: readers of the
// session wait for them (they would read the same), readers of others do
// not. Catch never moves the watermark, which says what an ingest has
// applied of the whole stream: a store that Catch feeds has none.
func (s *Store) Catch(ctx context.Context, session string, last uint64) error {
	_, err := s.catch(ctx, session, last)
	return err
}

// catch is Catch. read reports that the view after it is to rest on
// what the stream holds now, not on what the store read of it before:
// Catch read records of the session (or tried to); or the session is not
// loaded, and its load starts from a compaction the store remembers; or
// the session has seen a record past last, which the stream may no
// longer hold.
func (s *Store) catch(ctx context.Context, session string, last uint64) (read bool, err error) {
	if s.Loader == nil {
		return false, nil // nothing to read from: the store holds every record it was given
	}
	s.byCatch.Store(true)
	for {
		sl := s.metByReader(session)
		sl.mu.Lock()
		if sl.dead {
			sl.mu.Unlock()
			continue
		}
		if ld := sl.loading; ld != nil {
			sl.mu.Unlock()
			if err := ld.wait(ctx, session); err != nil {
				return false, err
			}
			continue
		}
		defer sl.mu.Unlock()
		// A session that has seen a record past last, the session's
		// last record in the stream when the caller looked, holds
		// records the stream has lost since, unless another reader
		// looked later and read them.
		read = sl.seq > last || sl.proj == nil && sl.fromKnown && sl.from > 0
		if sl.seq >= last {
			return read, nil
		}
		sl.recent = true
		// The records between what the slot has seen and last were not
		// met in order: the slot's index lacks them.
		s.dropIndex(sl)
		if sl.proj == nil {
			sl.seq = last
			return read, nil
		}
		ctx, cancel := context.WithTimeout(ctx, s.LoadTimeout)
		defer cancel()
		err := s.Loader.Records(ctx, session, sl.seq+1, last, func(seq uint64, data []byte) error {
			s.caught(sl, seq, data)
			return nil
		})
		if err != nil {
			return true, fmt.Errorf("store: catch %s up to %d: %w", session, last, err)
		}
		// The read proved it reached the session's last record up to
		// last: there is no other.
		sl.seq = max(sl.seq, last)
		return true, nil
	}
}

// caught applies one record read by Catch to a loaded session, as the
// ingest applies one, except that nothing is reported: the instance that
// holds the ingest reports the records it skips. The slot is locked.
func (s *Store) caught(sl *slot, seq uint64, data []byte) {
	if seq <= sl.seq {
		return
	}
	sl.seq = seq
	if sl.proj == nil {
		return // dropped by a failure: the next View loads it again
	}
	v, err := s.Decoder.Decode(data)
	if err != nil {
		sl.proj.Skip(seq)
		return
	}
	n := len(data)
	resets := s.resets(v, n)
	if resets {
		sl.from, sl.fromKnown = seq, true
		sl.quarantined = sl.quarantined[:0]
	}
	s.applyLoaded(sl, seq, decoded{v: v}, n, resets)
}

// ViewAtChecked calls fn with the session's projection once it holds
// every record of the session up to last (see Catch), and checks that
// under the session's lock: a session the store forgot between Catch and
// View loads again, without last, and is caught up again. A nil check
// is for a stream that never loses records. For a store whose stream may
// lose records (an operator's purge or deletion) before the store is
// told (Forget), after
// each catch-up it calls check, without the session's lock and before
// the view, with read set when the view is to rest on reads of the
// stream made now: when Catch read records of the session, which the
// view would otherwise show beside records that a removal before the
// read took; when the session is not loaded and loads from a compaction
// the store remembers, which a removal may have taken; and when the
// session has seen a record past last, which a removal explains (or a
// later caller's catch-up). With read set, check must return once every
// removal made before it was called has been applied to the store; a
// session forgotten then loads again, from the stream as it is. A
// session viewed again with nothing new to read has read unset: check
// may return at once. An error of check fails the view.
func (s *Store) ViewAtChecked(ctx context.Context, session string, last uint64, check func(ctx context.Context, read bool) error, fn func(p *projection.Session)) error {
	for try := 0; ; try++ {
		read, err := s.catch(ctx, session, last)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(ctx, read); err != nil {
				return err
			}
		}
		behind := false
		err = s.View(ctx, session, func(p *projection.Session) {
			var seq uint64
			if p != nil {
				seq = p.Seq()
			}
			if behind = seq < last; !behind {
				fn(p)
			}
		})
		if err != nil || !behind {
			return err
		}
		if try == 2 {
			// Only a record deleted from the stream meanwhile keeps a
			// load from reaching it.
			return fmt.Errorf("store: session %s: %w %d", session, ErrBehind, last)
		}
	}
}

// ErrBehind is returned by ViewAtChecked when the session's projection does not
// reach the record it was asked to.
var ErrBehind = errors.New("projection does not reach the session's record")

// ViewSettled is View for a store that applies every record as it is
// stored, in a process that is not the one the stream's removals are
// made through (package ownership's follower): whether a removal made
// before the request was received has been applied to the store, and
// one made before a record a load read, is proven when a view would
// show what is new. When the view
// would show a state of the session past every state it showed of it
// before (a record applied since), it calls settle first, without the
// session's lock, which returns once every removal made before the
// request was received, and before the record at the sequence it
// returns was stored, has been applied to the store, that sequence being
// at least seen, the session's last record the view found (a load may
// have read past what the store applied); it views again then,
// and shows the state once the session's last record is within that
// sequence (a session forgotten meanwhile loads from the stream as it
// is). So no reply shows records a removal took beside records stored
// after it, and one that shows what is new of a session rests on no
// removal made before it was asked for, as a reader's that read it now
// does (ViewAtChecked). A session shown again as it was costs no call.
// An error of settle fails the view, and so do maxSettles calls that
// each found a later record of the session: settle is to return a
// sequence past the records applied when it was called, which the store
// applies only once proven (as the follower does), so that a session
// written faster than a proof takes is shown all the same.
func (s *Store) ViewSettled(ctx context.Context, session string, settle func(ctx context.Context, seen uint64) (uint64, error), fn func(p *projection.Session)) error {
	var proven, seen uint64
	for try := 0; ; try++ {
		again := false
		err := s.view(ctx, session, func(sl *slot, p *projection.Session) {
			var seq uint64
			if p != nil {
				seq = p.Seq()
			}
			if sl != nil && seq > sl.shown {
				if try == 0 || seq > proven {
					again, seen = true, seq
					return
				}
				sl.shown = seq
			}
			fn(p)
		})
		if err != nil || !again {
			return err
		}
		if try == maxSettles {
			return fmt.Errorf("store: session %s: records came faster than %d proofs of the removals", session, maxSettles)
		}
		if proven, err = settle(ctx, seen); err != nil {
			return err
		}
	}
}

// maxSettles bounds the calls of settle of one ViewSettled.
const maxSettles = 8
