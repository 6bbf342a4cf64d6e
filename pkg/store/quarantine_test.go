package store

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// quarantinedHeld returns how many quarantined records the session's
// slot holds.
func quarantinedHeld(t *testing.T, s *Store, session string) int {
	t.Helper()
	sl := s.slot(session, false)
	require.NotNil(t, sl)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return len(sl.quarantined)
}

// A slot holds only the records quarantined for failing. Those past the
// session bound any load finds again from the records alone: a session
// that keeps getting records too big for it holds none of them, and
// each is listed once.
func TestStore_QuarantineHoldsOnlyFailures(t *testing.T) {
	const bound = 400
	l := newFakeLoader()
	s := newLazyStore(t, l, lazyConfig{maxSessions: 100, maxBytes: DefaultMaxBytes, maxSessionBytes: bound})
	f := &failingProjections{always: true}
	f.install(s)
	ingest(s, l, "a", userRecord("before"))
	requireView(t, s, l, "a")
	var want []uint64
	for range 50 {
		want = append(want, ingest(s, l, "a", userRecord(strings.Repeat("x", bound))))
	}
	require.Zero(t, quarantinedHeld(t, s, "a"), "records past the bound, met while loaded")
	s.Evict("a")
	for range 20 {
		want = append(want, ingest(s, l, "a", userRecord(strings.Repeat("y", bound))))
	}
	requireView(t, s, l, "a")
	require.Zero(t, quarantinedHeld(t, s, "a"), "records past the bound, found by a load")

	f.seq = l.lastSeq() + 1
	want = append(want, ingest(s, l, "a", userRecord("fails wherever it is applied")))
	ingest(s, l, "a", userRecord("after"))
	for range 2 {
		js, _, _ := viewJSON(t, s, "a")
		require.Equal(t, `[{"role":"user","content":"before"},{"role":"user","content":"after"}]`, js)
		require.Equal(t, 1, quarantinedHeld(t, s, "a"), "the record that failed is held")
		require.Equal(t, want, quarantinedSeqs(s), "each listed once")
		require.Equal(t, uint64(len(want)), s.Stats().Rejected)
		s.Evict("a")
	}
}
