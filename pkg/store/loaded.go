package store

// Loaded reports whether the session's projection is held in memory, so
// that View answers without reading the stream. It never waits: a session
// whose lock is held (being applied to or rendered) reports false, as do
// sessions not met. The answer may be stale by the time View runs; it
// only decides how a request is scheduled, never what it is answered.
func (s *Store) Loaded(session string) bool {
	sl := s.dir.get(session)
	if sl == nil || !sl.mu.TryLock() {
		return false
	}
	ok := sl.proj != nil && !sl.dead
	sl.mu.Unlock()
	return ok
}
