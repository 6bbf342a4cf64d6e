package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/pkg/projection"
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
	s := newStore(t)
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

// heldBy returns what a projection of the records holds once loaded, as
// the store counts it.
func heldBy(t *testing.T, s *Store, recs ...[]byte) int64 {
	t.Helper()
	p := projection.New(s.Options)
	for i, r := range recs {
		v, err := s.Decoder.Decode(r)
		require.NoError(t, err)
		p.Apply(uint64(i+1), v)
	}
	p.Fit() // as a load does
	return p.Size()
}

// A load counts what it has read in the cache's bytes while it reads, so
// what loads hold counts against MaxBytes and evicts others; once done
// the session counts once, and a failed load counts nothing.
func TestCache_LoadsInFlightCount(t *testing.T) {
	l := newFakeLoader()
	first := newStore(t)
	first.Loader = l
	big := userRecord(strings.Repeat("x", 2000))
	small := userRecord(strings.Repeat("y", 1000))
	ingest(first, l, "small", small)
	ingest(first, l, "big", big)
	first.Close()

	release := make(chan struct{})
	read := make(chan struct{})
	s := newStore(t)
	size := heldBy(t, s, big)
	s.MaxBytes = size + heldBy(t, s, small)/2 // either, not both
	s.Loader = &funcLoader{fakeLoader: l, records: func(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
		if err := l.Records(ctx, session, from, to, fn); err != nil || session != "big" {
			return err
		}
		close(read)
		return blockUntil(ctx, release)
	}}
	s.Advance(l.lastSeq())
	t.Cleanup(func() { s.Close() })

	require.NoError(t, s.View(context.Background(), "small", func(*projection.Session) {}))
	require.Equal(t, int64(1), s.Stats().Loaded)
	done := make(chan error, 1)
	go func() { done <- s.View(context.Background(), "big", func(*projection.Session) {}) }()
	<-read
	st := s.Stats()
	require.GreaterOrEqual(t, st.Bytes, size, "the load in flight is counted")
	require.Zero(t, st.Loaded, "and evicted the session loaded before it")
	close(release)
	require.NoError(t, <-done)
	st = s.Stats()
	require.Equal(t, int64(1), st.Loaded)
	require.Equal(t, size, st.Bytes, "counted once, as the session's size")

	// A load that fails leaves nothing counted.
	s.Evict("big")
	require.Zero(t, s.Stats().Bytes)
	ctx, cancel := context.WithCancel(context.Background())
	s.Loader = &funcLoader{fakeLoader: l, records: func(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
		if err := l.Records(ctx, session, from, to, fn); err != nil {
			return err
		}
		cancel()
		return ctx.Err()
	}}
	require.Error(t, s.View(ctx, "big", func(*projection.Session) {}))
	require.Zero(t, s.Stats().Bytes)
}

// What a view leaves with a projection (projection.Session.Keep: the
// service's rendered replies) counts in the cache's bytes, against
// MaxBytes, from the view on: it evicts other sessions, the least
// recently used first, and goes with its session when that is evicted.
func TestStore_KeptCountsInTheBound(t *testing.T) {
	l := newFakeLoader()
	s := newStore(t)
	s.Loader = l
	ids := []string{"s0", "s1", "s2", "s3"}
	for _, id := range ids {
		ingest(s, l, id, userRecord(id))
		requireView(t, s, l, id)
	}
	one := s.Stats().Bytes / int64(len(ids))
	s.MaxBytes = 20 * one
	keep := func(id string, n int64) {
		t.Helper()
		require.NoError(t, s.View(context.Background(), id, func(p *projection.Session) {
			p.Keep([]byte("rendered"), n)
		}))
		requireCacheConsistent(t, s)
	}
	keep("s1", 4*one)
	require.Equal(t, ids, loadedIDs(s, ids))
	require.Equal(t, int64(len(ids))*one+4*one, s.Stats().Bytes)
	keep("s1", 2*one) // replaced by a smaller one
	require.Equal(t, int64(len(ids))*one+2*one, s.Stats().Bytes)

	// Past the bound: sessions are evicted, down to it, and what an
	// evicted one kept goes with it.
	keep("s3", 17*one)
	loaded := loadedIDs(s, ids)
	require.Less(t, len(loaded), len(ids))
	require.LessOrEqual(t, s.Stats().Bytes, s.MaxBytes)
	for _, id := range ids {
		if slices.Contains(loaded, id) {
			continue
		}
		requireView(t, s, l, id)
		require.NoError(t, s.View(context.Background(), id, func(p *projection.Session) {
			require.Nil(t, p.Kept(), "%s: a projection loaded again keeps nothing", id)
		}))
	}
	requireCacheConsistent(t, s)
}
