package bus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

// The node that leads the stream freezes (SIGSTOP: its sockets stay
// open, it answers nothing). Its replica stays in the queue group that
// answers the stream's direct gets until the other servers drop its
// route, which takes their route ping interval or longer: a share of the
// direct gets sent meanwhile are never answered, here for the whole
// freeze. A read by sequence (a session's load by its record index, the
// ingest's gap filler) asks again for what did not come: it must not
// fail. (Before, a read by the index failed on the first lost reply,
// "no reply in 1s", every time for 20 s.)
func TestDirectReads_FrozenReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nats-server and runs a cluster of processes")
	}
	c := natstest.StartProcessCluster(t, 3)
	nc := c.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cfg := transcripts(t)
	cfg.Replicas = 3
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = bus.EnsureStream(ctx, js, cfg)
	require.NoError(t, err)
	all := publishN(t, js, 300)
	leader := c.WaitStreamLeader(t, "TRANSCRIPTS")
	// Every replica holds every record before one freezes.
	require.Eventually(t, func() bool {
		st, err := js.Stream(ctx, "TRANSCRIPTS")
		if err != nil {
			return false
		}
		for _, p := range st.CachedInfo().Cluster.Replicas {
			if !p.Current || p.Lag > 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	frozen := leader
	if nc.ConnectedServerName() == leader.Name {
		nc = natstest.Connect(t, c.Nodes[(slices.Index(c.Nodes, leader)+1)%3].URL)
	}
	frozen.Freeze(t)
	defer frozen.Thaw(t)

	var seqs []uint64
	var want []published
	for _, p := range all {
		if p.subject == "transcripts.s1" {
			seqs = append(seqs, p.seq)
			want = append(want, p)
		}
	}
	for i := range 10 {
		var got []published
		start := time.Now()
		err := bus.ReadSubjectSeqs(ctx, nc, "TRANSCRIPTS", "transcripts.s1", seqs, func(seq uint64, data []byte) error {
			got = append(got, published{"transcripts.s1", seq, string(data)})
			return nil
		})
		require.NoError(t, err, "read %d by the index", i)
		require.Equal(t, want, got, "read %d by the index", i)
		t.Logf("read %d by the index: %d records in %v", i, len(got), time.Since(start).Round(time.Millisecond))

		got = got[:0]
		start = time.Now()
		err = bus.ReadSeqs(ctx, nc, "TRANSCRIPTS", seqs, func(seq uint64, data []byte) error {
			got = append(got, published{"transcripts.s1", seq, string(data)})
			return nil
		})
		require.NoError(t, err, "read %d by sequence", i)
		require.Equal(t, want, got, "read %d by sequence", i)
		t.Logf("read %d by sequence: %d records in %v", i, len(got), time.Since(start).Round(time.Millisecond))
	}
}
