package store

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// loadedIDs lists which of ids are loaded.
func loadedIDs(s *Store, ids []string) []string {
	var out []string
	for _, id := range ids {
		if sl := s.slot(id, false); sl != nil {
			sl.mu.Lock()
			if sl.proj != nil {
				out = append(out, id)
			}
			sl.mu.Unlock()
		}
	}
	return out
}

func TestStore_EvictsTheLeastRecentlyUsed(t *testing.T) {
	l := newFakeLoader()
	s := New()
	s.Loader = l
	s.MaxSessions = 10
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
		ingest(s, l, ids[i], userRecord(ids[i]))
	}
	for _, id := range ids[:10] {
		requireView(t, s, l, id)
	}
	require.Equal(t, ids[:10], loadedIDs(s, ids), "within the bound, nothing is evicted")

	// Used since: s0 to s4 by readers, s7 by the ingest.
	for _, id := range ids[:5] {
		requireView(t, s, l, id)
	}
	ingest(s, l, "s7", userRecord("s7 again"))

	// Past the bound, the cache evicts down to 90% of it: the least
	// recently used go first.
	requireView(t, s, l, "s10")
	require.Equal(t, []string{"s0", "s1", "s2", "s3", "s4", "s7", "s8", "s9", "s10"}, loadedIDs(s, ids))
	requireView(t, s, l, "s11") // 10 loaded: within the bound
	requireView(t, s, l, "s5")
	require.Equal(t, []string{"s0", "s1", "s2", "s3", "s4", "s5", "s7", "s10", "s11"}, loadedIDs(s, ids))
	requireCacheConsistent(t, s)
	require.Equal(t, uint64(4), s.Stats().Evictions)
}
