package store

import "time"

// Loaded reports whether View would answer the session from memory now,
// without reading the stream: its projection is held, or it is
// remembered as having no records (misses.go). It never waits: a session
// whose lock is held (being applied to or rendered) reports false. The
// answer may be stale by the time View runs; it only decides how a
// request is scheduled, never what it is answered.
func (s *Store) Loaded(session string) bool {
	sl := s.dir.get(session)
	if sl == nil {
		return s.Loader == nil || (s.MissTTL > 0 && s.dir.missedAt(session, time.Now()))
	}
	if !sl.mu.TryLock() {
		return false
	}
	ok := sl.proj != nil && !sl.dead
	sl.mu.Unlock()
	return ok
}

// Shown is Loaded for ViewSettled: it reports whether the session's
// projection is held and its state is one ViewSettled showed before, so
// that a view of it calls no settle. It never waits, as Loaded.
func (s *Store) Shown(session string) bool {
	sl := s.dir.get(session)
	if sl == nil {
		return s.Loader == nil || (s.MissTTL > 0 && s.dir.missedAt(session, time.Now()))
	}
	if !sl.mu.TryLock() {
		return false
	}
	ok := sl.proj != nil && !sl.dead && sl.proj.Seq() <= sl.shown
	sl.mu.Unlock()
	return ok
}
