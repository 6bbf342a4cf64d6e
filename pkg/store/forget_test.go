package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Sessions that are not loaded and whose checkpoint is written are
// forgotten past MaxKnown, and load as if they had been kept.
func TestStore_ForgetsIdleSessions(t *testing.T) {
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	const bound = 1000
	l := newFakeLoader()
	s := newStore(t)
	s.Loader = seqLoader{l} // a Fresh store loads the sessions it indexed by sequence
	s.Fresh = true
	s.MaxKnown = bound
	s.MaxSessionBytes = 1000
	t.Cleanup(func() { s.Close() })
	id := func(i int) string { return fmt.Sprintf("t%d", i) }

	// A session with a record quarantined for its size, viewed early,
	// then evicted: a load finds that record again.
	ingest(s, l, "q", userRecord("before"))
	bad := ingest(s, l, "q", userRecord(strings.Repeat("x", 1000)))
	ingest(s, l, "q", userRecord("after"))
	requireView(t, s, l, "q")
	require.Equal(t, []uint64{bad}, quarantinedSeqs(s))
	s.Evict("q")

	for i := range n {
		ingest(s, l, id(i), userRecord(id(i)))
		if i%10 == 0 {
			ingest(s, l, id(i), compactionRecord(id(i)+" kept"))
		}
	}
	// Once their checkpoints are written, idle sessions are forgotten.
	require.Eventually(t, func() bool { return s.Stats().Sessions <= bound }, 20*time.Second, time.Millisecond,
		"sessions held: %d", s.Stats().Sessions)
	require.NoError(t, s.checkpoints.flush(context.Background())) // no pass runs from here on
	require.Len(t, s.Sessions(), int(s.Stats().Sessions), "the sessions counted are those held")
	require.Equal(t, l.lastSeq(), s.Applied())
	require.Nil(t, s.slot("q", false), "the session with a quarantined record is forgotten too")

	// Forgotten sessions load from their checkpoint or their subject.
	for _, i := range []int{0, 1, 10, 12345 % n, n - 1} {
		requireView(t, s, l, id(i))
	}
	reads := l.readsOf(id(10))
	require.NotEmpty(t, reads)
	require.Equal(t, l.stream(id(10))[1].seq+1, reads[len(reads)-1].from,
		"loaded from the compaction's checkpoint: by its index, then the subject after it")

	// A forgotten session that gets a record again is not taken for a
	// session whose first record that is.
	for _, i := range []int{1, 20, 777} {
		ingest(s, l, id(i), userRecord(id(i)+" again"))
		requireView(t, s, l, id(i))
	}
	for i := range 3 * bound {
		ingest(s, l, id(i), userRecord(id(i)+" and again"))
	}
	requireView(t, s, l, id(1))
	requireView(t, s, l, id(20))

	// The quarantined record is found again, never applied, and listed
	// once.
	requireView(t, s, l, "q")
	require.Equal(t, []uint64{bad}, quarantinedSeqs(s))
	requireCacheConsistent(t, s)
}
