package store

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
	if sl := s.dir.get(session); sl != nil {
		s.forgetSlot(sl)
	}
}

// ForgetAll forgets every session (Forget): when the records removed
// are not known, or are of many sessions.
func (s *Store) ForgetAll() {
	for _, sl := range s.dir.all() {
		s.forgetSlot(sl)
	}
}

// ForgetHolding forgets every session that may hold the record seq: one
// whose last record seen is at or past it.
func (s *Store) ForgetHolding(seq uint64) {
	for _, sl := range s.dir.all() {
		sl.mu.Lock()
		holds := sl.seq >= seq
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
