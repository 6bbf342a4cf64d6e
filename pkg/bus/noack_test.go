package bus_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// The ingest consumer acknowledges nothing. An owner that took records
// and died before applying them (its connection gone, as with SIGKILL)
// does not get them delivered again to anyone: the next owner is pinned
// once the pin's TTL has passed, and its first record is the first the
// dead one never took. Every record before it is in the stream, where a
// new ingest store reads the sessions it is asked for: nothing is lost,
// and nothing is delivered twice.
func TestIngest_NoAcks_DeadOwnerLosesNothing(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	cfg, err := streams.Ingest()
	require.NoError(t, err)
	require.Equal(t, jetstream.AckNonePolicy, cfg.AckPolicy)
	cfg.PinnedTTL = time.Second
	cons, err := bus.OpenConsumer(ctx, st, cfg, 0)
	require.NoError(t, err)
	before := publishN(t, js, 10)

	// The first owner pulls five records under the pin and dies.
	nc, err := nats.Connect(js.Conn().ConnectedUrl())
	require.NoError(t, err)
	djs, err := jetstream.New(nc)
	require.NoError(t, err)
	dead, err := djs.Consumer(ctx, st.CachedInfo().Config.Name, streams.IngestName)
	require.NoError(t, err)
	batch, err := dead.Fetch(5, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(streams.IngestGroup))
	require.NoError(t, err)
	var taken []uint64
	for m := range batch.Messages() {
		meta, err := m.Metadata()
		require.NoError(t, err)
		taken = append(taken, meta.Sequence.Stream)
	}
	require.Equal(t, []uint64{before[0].seq, before[1].seq, before[2].seq, before[3].seq, before[4].seq}, taken)
	nc.Close()

	var col collector
	var mu sync.Mutex
	var firsts []uint64
	in, err := bus.StartIngest(cons, 0, nil, col.handle, nil, bus.WithPin(bus.Pin{Gained: func(_ string, first uint64, _ bool) {
		mu.Lock()
		defer mu.Unlock()
		firsts = append(firsts, first)
	}}))
	require.NoError(t, err)
	t.Cleanup(func() { in.Close() })
	after := publishN(t, js, 5)
	want := append(append([]published(nil), before[5:]...), after...)
	require.Eventually(t, func() bool { return len(col.got()) >= len(want) }, 20*time.Second, 5*time.Millisecond,
		"the next owner is pinned within about the pinned TTL")
	require.Equal(t, want, col.got(), "what the dead owner did not take, once, in order")
	mu.Lock()
	require.Equal(t, []uint64{before[5].seq}, firsts, "the new pin's first record follows what the dead owner took")
	mu.Unlock()

	// What the dead owner took is read from the stream.
	var read []published
	require.NoError(t, bus.ReadRange(ctx, js.Conn(), st.CachedInfo().Config.Name, 1, before[5].seq-1, func(m bus.Msg) error {
		read = append(read, published{m.Subject, m.Seq, string(m.Data)})
		return nil
	}))
	require.Equal(t, before[:5], read)
}
