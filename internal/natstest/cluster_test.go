package natstest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
)

// Three servers form a cluster; an R3 stream keeps its records when its
// leader stops, gets a new leader, and the stopped node comes back on
// its ports and store and catches up.
func TestStartCluster(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	require.Len(t, c.Nodes, 3)
	js, err := jetstream.New(c.Connect(t))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3, AllowDirect: true})
	require.NoError(t, err)
	leader := c.WaitStreamLeader(t, "R3")
	publish := func(n int) {
		for i := range n {
			_, err := js.Publish(ctx, "r3.a", fmt.Appendf(nil, "%d", i))
			require.NoError(t, err)
		}
	}
	publish(10)

	leader.Stop()
	require.False(t, leader.Running())
	next := c.WaitStreamLeader(t, "R3")
	require.NotEqual(t, leader.Name, next.Name, "a running node leads")
	publish(10) // while the old leader is down

	leader.Start(t)
	require.True(t, leader.Running())
	require.Eventually(t, func() bool {
		st, err := js.Stream(ctx, "R3")
		if err != nil {
			return false
		}
		info := st.CachedInfo()
		if info.State.Msgs != 20 {
			return false
		}
		if info.Cluster.Leader == leader.Name {
			return true
		}
		for _, p := range info.Cluster.Replicas {
			if p.Name == leader.Name {
				return p.Current && !p.Offline
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "the restarted node catches up")
}
