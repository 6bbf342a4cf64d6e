package removals

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/streams"
)

// The ingests of an instance's partitions that meet records past the
// verified sequence while a check is under way share the next read of
// the stream's state: records delivered before that read began are
// covered by it, so a burst of deliveries costs one read, not one each.
func TestRemovals_ConcurrentNeedsShareOneRead(t *testing.T) {
	js, ctx, cfg := transcripts(t)
	nc := js.Conn()
	publish := func(n int) {
		for i := range n {
			_, err := js.Publish(ctx, fmt.Sprintf("transcripts.s%d", i), []byte("{}"))
			require.NoError(t, err)
		}
	}
	publish(10)
	r := open(t, ctx, nc, cfg.Name, func() []*store.Store { return nil }, func() {})
	require.Equal(t, uint64(10), r.verified.Load())
	publish(16) // sequences 11 to 26, delivered to 16 partitions' ingests
	reads := r.reads.Load()
	// The deliveries all come while the lock is taken.
	r.mu.Lock()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() { r.Cover(uint64(11 + i)) })
	}
	r.mu.Unlock()
	wg.Wait()
	require.Equal(t, reads+1, r.reads.Load(), "one read of the stream's state for the 16 deliveries")
	require.Equal(t, uint64(26), r.verified.Load())

	// Records already verified cost no read; one past it does.
	r.Cover(26)
	require.Equal(t, reads+1, r.reads.Load())
	publish(1)
	r.Cover(27)
	require.Equal(t, reads+2, r.reads.Load())
}

// A check reads the stream's state with no lock held: while the read is
// outstanding, the advisories' lock is free (count, a drain), and a
// second delivery past the verified sequence waits for the check under
// way instead of reading again.
func TestRemovals_NoLockWhileReading(t *testing.T) {
	js, ctx, cfg := transcripts(t)
	nc := js.Conn()
	_, err := js.Publish(ctx, "transcripts.s1", []byte("{}"))
	require.NoError(t, err)
	r := open(t, ctx, nc, cfg.Name, func() []*store.Store { return nil }, func() {})
	_, err = js.Publish(ctx, "transcripts.s2", []byte("{}"))
	require.NoError(t, err)

	entered, release := make(chan struct{}, 4), make(chan struct{})
	r.mu.Lock() // the watcher's own checks read it after taking mu
	read := r.state
	r.state = func(ctx context.Context) (uint64, uint64, error) {
		entered <- struct{}{}
		<-release
		return read(ctx)
	}
	r.mu.Unlock()
	reads := r.reads.Load()
	covered := make(chan struct{})
	go func() { r.Cover(2); close(covered) }()
	<-entered // the read is outstanding
	require.True(t, r.mu.TryLock(), "the removals' lock is held while the stream's state is read")
	r.mu.Unlock()
	require.Equal(t, uint64(0), r.Count())
	second := make(chan struct{})
	go func() { r.Cover(2); close(second) }()
	close(release)
	<-covered
	<-second
	require.Equal(t, uint64(2), r.verified.Load())
	require.LessOrEqual(t, r.reads.Load(), reads+2)
}

// Ahead returns at once and the watcher's goroutine checks the stream's
// state: a record given to it is verified without a caller waiting, the
// records given while a check is in flight share the next one, and a
// removal no advisory told of is found by it (every session forgotten,
// the removal counted) before the record after it is verified.
func TestRemovals_AheadChecksInTheBackground(t *testing.T) {
	js, ctx, cfg := transcripts(t)
	nc := js.Conn()
	publish := func(n int) uint64 {
		var last uint64
		for i := range n {
			ack, err := js.Publish(ctx, fmt.Sprintf("transcripts.s%d", i), []byte("{}"))
			require.NoError(t, err)
			last = ack.Sequence
		}
		return last
	}
	publish(2)
	st := store.New()
	t.Cleanup(func() { st.Close() })
	var removed atomic.Int32
	r := open(t, ctx, nc, cfg.Name, func() []*store.Store { return []*store.Store{st} }, func() { removed.Add(1) })

	reads := r.reads.Load()
	last := publish(8)
	for seq := uint64(3); seq <= last; seq++ {
		r.Ahead(seq)
	}
	require.Eventually(t, func() bool { return r.Covered(last) }, 10*time.Second, time.Millisecond, "Ahead's records verified")
	require.LessOrEqual(t, r.reads.Load()-reads, uint64(8), "one read a record at most")
	reads = r.reads.Load()
	r.Cover(last)
	require.Equal(t, reads, r.reads.Load(), "a record Ahead verified costs Cover no read")

	// A removal told by no advisory (the subscription gone): the check
	// Ahead starts finds it.
	require.NoError(t, r.sub.Unsubscribe())
	s, err := js.Stream(ctx, cfg.Name)
	require.NoError(t, err)
	require.NoError(t, s.DeleteMsg(ctx, 1))
	next := publish(1)
	r.Ahead(next)
	require.Eventually(t, func() bool { return r.Covered(next) }, 10*time.Second, time.Millisecond)
	require.NotZero(t, removed.Load(), "the removal found")
	require.Equal(t, uint64(1), r.Count(), "the removal counted as applied")
}

// A read of the stream's state that fails (a server slow to answer, an
// election) is read again, not answered by forgetting every session:
// under load the stream answers late, and a store emptied then loads
// every session back from the stream at once. A removal made meanwhile
// is still found by the read that succeeds, as its count says.
func TestRemovals_FailedReadIsReadAgain(t *testing.T) {
	js, ctx, cfg := transcripts(t)
	nc := js.Conn()
	_, err := js.Publish(ctx, "transcripts.s1", []byte("{}"))
	require.NoError(t, err)
	st := store.New()
	t.Cleanup(func() { _ = st.Close() })
	st.Apply("s1", 1, []byte(`{"role":"user","content":"hi"}`))
	require.True(t, st.Loaded("s1"))
	r := open(t, ctx, nc, cfg.Name, func() []*store.Store { return []*store.Store{st} }, func() {})

	real := r.state
	var failed atomic.Int32
	r.state = func(ctx context.Context) (uint64, uint64, error) {
		if failed.Add(1) == 1 {
			return 0, 0, context.DeadlineExceeded
		}
		return real(ctx)
	}
	_, err = js.Publish(ctx, "transcripts.s1", []byte("{}"))
	require.NoError(t, err)
	r.Cover(2)
	require.GreaterOrEqual(t, failed.Load(), int32(2), "read again")
	require.Equal(t, uint64(2), r.verified.Load())
	require.True(t, st.Loaded("s1"), "one failed read forgets nothing")
}

// transcripts makes the TRANSCRIPTS stream on a server of the test's
// own, and a context for the test's requests.
func transcripts(t *testing.T) (jetstream.JetStream, context.Context, jetstream.StreamConfig) {
	t.Helper()
	js := natstest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	cfg, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	return js, ctx, cfg
}

// open opens a watcher of the stream, logging nowhere, closed with the
// test.
func open(t *testing.T, ctx context.Context, nc *nats.Conn, stream string, stores func() []*store.Store, onRemoval func()) *Watcher {
	t.Helper()
	r, err := Open(ctx, t.Context(), nc, stream, true, stores, onRemoval, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}
