package natstest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
)

// A cluster of nats-server processes: an R3 stream keeps every
// acknowledged record through a SIGKILL of its leader's node (a new
// leader is elected, the killed node recovers its store and catches up
// when it starts again) and through a SIGSTOP of a node (the others
// elect a leader without it; it catches up when it runs again).
func TestStartProcessCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nats-server and waits for elections")
	}
	c := natstest.StartProcessCluster(t, 3)
	// A client of a frozen server notices only by its pings: every
	// second here, not every two minutes.
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, AllowDirect: true})
	require.NoError(t, err)
	total := 0
	publish := func(n int) {
		for i := range n {
			require.Eventually(t, func() bool {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := js.Publish(pctx, "r3.a", fmt.Appendf(nil, "%d", i), jetstream.WithMsgID(fmt.Sprintf("m%d", total)))
				return err == nil
			}, 60*time.Second, 50*time.Millisecond, "publish %d", total)
			total++
		}
	}
	caughtUp := func(node *natstest.Node) {
		require.Eventually(t, func() bool {
			st, err := js.Stream(ctx, "R3")
			if err != nil {
				return false
			}
			info := st.CachedInfo()
			if info.State.Msgs != uint64(total) {
				return false
			}
			if info.Cluster.Leader == node.Name {
				return true
			}
			for _, p := range info.Cluster.Replicas {
				if p.Name == node.Name {
					return p.Current && !p.Offline
				}
			}
			return false
		}, 90*time.Second, 100*time.Millisecond, "node %s catches up", node.Name)
	}
	publish(10)

	leader := c.WaitStreamLeader(t, "R3")
	leader.Kill()
	require.False(t, leader.Running())
	next := c.WaitStreamLeader(t, "R3")
	require.NotEqual(t, leader.Name, next.Name, "a running node leads")
	publish(10)
	leader.Start(t)
	caughtUp(leader)

	frozen := c.WaitStreamLeader(t, "R3")
	frozen.Freeze(t)
	require.True(t, frozen.Running(), "a frozen node's process is still there")
	publish(10) // retried until the others have elected a leader
	frozen.Thaw(t)
	caughtUp(frozen)
}
