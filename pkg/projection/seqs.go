package projection

import "sort"

// MessageSeqs appends to dst the stream sequence of the record each
// message of Messages came from, in the same order: the sequence of the
// compaction for a message of its snapshot. A renderer that reports what
// it changed, or names where a compaction could cut, says it in records.
func (s *Session) MessageSeqs(dst []uint64) []uint64 {
	s.Messages() // brings every entry's kept flag up to date
	for i := range s.entries {
		if s.entries[i].kept {
			dst = append(dst, s.entries[i].seq)
		}
	}
	return dst
}

// Version returns a number that changes whenever the context changes:
// whatever is derived from Messages and Dropped may be kept while it and
// Seq stay the same.
func (s *Session) Version() uint64 { return s.version }

// Keep holds v with the session, as its holder's to read back with Kept:
// something derived from the session that is worth as much as the
// session to keep (the service's latest rendered replies), sized at n
// bytes, which the store counts in its memory bound and lets go with the
// session. Keep replaces what was held; nil holds nothing.
func (s *Session) Keep(v any, n int64) {
	if v == nil {
		n = 0
	}
	s.held, s.heldBytes = v, n
}

// Kept returns what Keep holds, or nil.
func (s *Session) Kept() any { return s.held }

// KeptBytes returns the size Keep was given for what it holds.
func (s *Session) KeptBytes() int64 { return s.heldBytes }

// MessageSeqsFrom appends to dst the sequences MessageSeqs gives for the
// messages of Messages from the i-th on: a caller that holds those of the
// messages before i, unchanged, reads only what follows, not the whole
// session.
func (s *Session) MessageSeqsFrom(dst []uint64, i int) []uint64 {
	s.Messages() // brings every entry's kept flag and offset up to date
	offs := s.list.offs
	// The entries before e start before message i: each is at most one
	// message.
	e := sort.Search(len(offs), func(k int) bool { return offs[k] >= i })
	for ; e < len(s.entries); e++ {
		if s.entries[e].kept {
			dst = append(dst, s.entries[e].seq)
		}
	}
	return dst
}
