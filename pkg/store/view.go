package store

import (
	"context"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/pkg/projection"
)

// View calls fn with the session's projection under the session's lock,
// loading it first when it is not cached, or with nil for a session that
// has no records. fn must not keep the projection or what it returns
// beyond the call.
//
// A load reads the stream without holding the session's lock, within
// LoadTimeout and the context; readers of a session being loaded wait for
// that load, or for their context.
func (s *Store) View(ctx context.Context, session string, fn func(p *projection.Session)) error {
	return s.view(ctx, session, func(_ *slot, p *projection.Session) { fn(p) })
}

// view is View, fn also given the session's slot (locked), nil for a
// session without one.
func (s *Store) view(ctx context.Context, session string, fn func(sl *slot, p *projection.Session)) error {
	for {
		sl := s.slot(session, false)
		if sl == nil {
			if s.Loader == nil || s.complete() || (s.MissTTL > 0 && s.dir.missedAt(session, time.Now())) {
				fn(nil, nil)
				return nil
			}
			// Not met: the stream may hold it. The slot is there for the
			// ingest to find while the load reads.
			sl = s.metByReader(session)
		}
		sl.mu.Lock()
		if sl.dead {
			sl.mu.Unlock()
			continue
		}
		if sl.proj != nil {
			return s.viewLoaded(sl, fn)
		}
		if ld := sl.loading; ld != nil {
			sl.mu.Unlock()
			if err := ld.wait(ctx, session); err != nil {
				return err
			}
			continue
		}
		if s.Loader == nil {
			sl.mu.Unlock()
			return fmt.Errorf("store: session %s: its projection failed and there is no Loader to load it again", session)
		}
		err := s.load(ctx, sl)
		if sl.seq == 0 {
			// No records, none met meanwhile: nothing to keep.
			s.cache.drop(sl)
			if err == nil && s.MissTTL > 0 {
				s.dropIndex(sl)
				s.dir.removeMissed(sl, time.Now().Add(s.MissTTL))
			} else {
				s.remove(sl)
			}
			sl.mu.Unlock()
			if err == nil {
				fn(nil, nil)
			}
			return err
		}
		if err != nil {
			sl.mu.Unlock()
			return err
		}
		return s.viewLoaded(sl, fn)
	}
}

// viewLoaded calls fn with a loaded session and unlocks it.
func (s *Store) viewLoaded(sl *slot, fn func(sl *slot, p *projection.Session)) error {
	defer s.evict()
	rendered := false
	defer func() {
		if !rendered {
			s.cache.drop(sl) // fn panicked: the projection may be half-rendered
		}
		sl.mu.Unlock()
	}()
	s.cache.touch(sl)
	sl.recent = true
	p := sl.proj
	if p.Seq() == 0 {
		p = nil
	}
	fn(sl, p)
	rendered = true
	// What fn left with the projection counts in the bound (the
	// service's rendered replies, the renderings it cached): evict,
	// deferred above, sees it.
	if d := sl.proj.KeptBytes() - sl.held; d != 0 {
		sl.held += d
		s.cache.grow(d)
	}
	s.resize(sl)
	return nil
}
