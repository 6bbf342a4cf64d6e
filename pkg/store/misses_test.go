package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
)

// However many readers ask for a session being loaded, the store reads
// it once: the others wait for that load.
func TestStore_LoadsOnceForConcurrentReaders(t *testing.T) {
	l := newFakeLoader()
	first := newStore(t)
	first.Loader = l
	ingest(first, l, "a", userRecord("one"))
	ingest(first, l, "a", userRecord("two"))
	first.Close()

	release := make(chan struct{})
	var reads atomic.Int32
	s := newStore(t)
	s.Loader = &funcLoader{fakeLoader: l, records: func(ctx context.Context, session string, from, to uint64, fn func(uint64, []byte) error) error {
		reads.Add(1)
		if err := blockUntil(ctx, release); err != nil {
			return err
		}
		return l.Records(ctx, session, from, to, fn)
	}}
	s.Advance(l.lastSeq())
	t.Cleanup(func() { s.Close() })

	const readers = 16
	var wg sync.WaitGroup
	seqs := make(chan uint64, readers)
	view := func() {
		defer wg.Done()
		err := s.View(context.Background(), "a", func(p *projection.Session) { seqs <- p.Seq() })
		require.NoError(t, err)
	}
	wg.Add(1)
	go view()
	require.Eventually(t, func() bool { return reads.Load() == 1 }, 10*time.Second, time.Millisecond, "the first load reads")
	for range readers - 1 {
		wg.Add(1)
		go view()
	}
	requireSilent(t, seqs)
	close(release)
	wg.Wait()
	close(seqs)
	for seq := range seqs {
		require.Equal(t, uint64(2), seq)
	}
	require.Equal(t, int32(1), reads.Load(), "the session was read once")
	require.Equal(t, uint64(1), s.Stats().Loads)
}

// A session with no records is remembered for MissTTL: asked again, it
// costs no checkpoint lookup and no read. A record of it ends that at
// once, and so does its slot being forgotten later.
func TestStore_RemembersMisses(t *testing.T) {
	l := newFakeLoader()
	s := newStore(t)
	s.Loader = l
	t.Cleanup(func() { s.Close() })
	ingest(s, l, "other", userRecord("x"))

	for range 5 {
		_, _, isNil := viewJSON(t, s, "nobody")
		require.True(t, isNil)
	}
	require.Len(t, l.readsOf("nobody"), 1, "asked five times, read once")
	l.mu.Lock()
	require.Equal(t, 1, l.checkpointCalls, "one checkpoint lookup")
	l.mu.Unlock()
	require.Equal(t, uint64(1), s.Stats().Sessions, "a miss holds no slot")

	// The session gets a record: the next reader sees it.
	ingest(s, l, "nobody", userRecord("hello"))
	requireView(t, s, l, "nobody")

	// Forgotten, it loads again rather than answer from the old miss.
	s.Evict("nobody")
	require.Eventually(t, func() bool {
		s.dir.sweep(0, s.forgettable)
		return s.slot("nobody", false) == nil
	}, 10*time.Second, time.Millisecond, "the session is forgotten")
	requireView(t, s, l, "nobody")

	// Without a miss cache every request reads.
	s2 := newStore(t)
	s2.Loader = l
	s2.MissTTL = 0
	t.Cleanup(func() { s2.Close() })
	before := len(l.readsOf("nobody2"))
	for range 3 {
		_, _, isNil := viewJSON(t, s2, "nobody2")
		require.True(t, isNil)
	}
	require.Len(t, l.readsOf("nobody2"), before+3)
}

// requireSilent checks that nothing has arrived on ch yet.
func requireSilent[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("already: %v", v)
	default:
	}
}

// Loaded says whether View answers from memory.
func TestStore_Loaded(t *testing.T) {
	l := newFakeLoader()
	s := newStore(t)
	s.Loader = l
	t.Cleanup(func() { s.Close() })
	ingest(s, l, "a", userRecord("one"))
	require.False(t, s.Loaded("a"), "met, not loaded")
	requireView(t, s, l, "a")
	require.True(t, s.Loaded("a"))
	s.Evict("a")
	require.False(t, s.Loaded("a"))

	require.False(t, s.Loaded("nobody"))
	_, _, isNil := viewJSON(t, s, "nobody")
	require.True(t, isNil)
	require.True(t, s.Loaded("nobody"), "remembered without records")
	ingest(s, l, "nobody", userRecord("hi"))
	require.False(t, s.Loaded("nobody"), "a record ends the miss")
}

// A store that met every record of the stream from the first (Fresh)
// answers a session it holds no slot of as having no records, without
// reading the stream, however many are asked for; the session's first
// record is seen by the next view once applied. Once the store has
// forgotten a session, an unknown one is read again.
func TestStore_FreshAnswersUnknownWithoutReading(t *testing.T) {
	l := newFakeLoader()
	s := newStore(t)
	s.Loader = l
	s.Fresh = true
	s.MissTTL = 0 // as the readers' store: no miss remembered
	t.Cleanup(func() { s.Close() })
	ingest(s, l, "known", userRecord("one"))

	seqOf := func(session string) uint64 {
		var seq uint64
		require.NoError(t, s.View(context.Background(), session, func(p *projection.Session) {
			if p != nil {
				seq = p.Seq()
			}
		}))
		return seq
	}
	for i := range 100 {
		require.Zero(t, seqOf(fmt.Sprintf("unknown-%d", i)))
	}
	l.mu.Lock()
	require.Zero(t, l.checkpointCalls, "no checkpoint looked up")
	require.Empty(t, l.reads, "no subject read")
	l.mu.Unlock()

	seq := ingest(s, l, "unknown-7", userRecord("first"))
	require.Equal(t, seq, seqOf("unknown-7"), "the first record, once applied")

	s.dir.forgot.Store(true) // as after a sweep past MaxKnown
	require.Zero(t, seqOf("unknown-8"))
	l.mu.Lock()
	require.Equal(t, 1, l.checkpointCalls, "a store that forgot a session reads an unknown one")
	l.mu.Unlock()
}
