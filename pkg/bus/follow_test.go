package bus_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

// A follower hands on every message after its start, in stream order,
// those stored after it started included, and a deleted one is passed
// over; after Stop its handler is not called again.
func TestFollow(t *testing.T) {
	js := natstest.JetStream(t)
	st := ensureTranscripts(t, js)
	before := publishN(t, js, 5)
	require.NoError(t, st.DeleteMsg(testContext(t), before[3].seq))

	var mu sync.Mutex
	var got []bus.Msg
	f, err := bus.Follow(testContext(t), js, "TRANSCRIPTS", before[1].seq, 0, func(m bus.Msg) {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}, nil)
	require.NoError(t, err)
	after := publishN(t, js, 4)
	want := append([]uint64{before[2].seq, before[4].seq}, seqsOf(after)...)
	seqs := func() []uint64 {
		mu.Lock()
		defer mu.Unlock()
		var out []uint64
		for _, m := range got {
			out = append(out, m.Seq)
		}
		return out
	}
	require.Eventually(t, func() bool { return len(seqs()) >= len(want) }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, want, seqs())
	require.Equal(t, after[3].seq, f.Last())
	mu.Lock()
	require.Equal(t, after[0].subject, got[2].Subject)
	require.Equal(t, after[0].data, string(got[2].Data))
	mu.Unlock()

	f.Stop()
	n := len(seqs())
	publishN(t, js, 3)
	// A second follower sees the new records: the first had its chance.
	f2, err := bus.Follow(testContext(t), js, "TRANSCRIPTS", after[3].seq, 0, func(bus.Msg) {}, nil)
	require.NoError(t, err)
	defer f2.Stop()
	require.Eventually(t, func() bool { return f2.Last() > after[3].seq+2 }, 10*time.Second, 5*time.Millisecond)
	require.Len(t, seqs(), n, "handled after Stop")
}

// Follow fails, naming the stream, when there is no such stream.
func TestFollow_NoStream(t *testing.T) {
	js := natstest.JetStream(t)
	_, err := bus.Follow(testContext(t), js, "NOPE", 0, 0, func(bus.Msg) {}, nil)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	require.ErrorContains(t, err, "NOPE")
}

func seqsOf(ps []published) []uint64 {
	var out []uint64
	for _, p := range ps {
		out = append(out, p.seq)
	}
	return out
}
