//go:build slow

package integration

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/streams"
)

// TestStart_NoJetStream: a server without JetStream is named as such, not
// reported as a timeout.
func TestStart_NoJetStream(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(ns.Shutdown)

	cfg := app.DefaultConfig()
	cfg.NATSURL = ns.ClientURL()
	a := app.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = a.Open(ctx)
	require.ErrorIs(t, err, app.ErrNoJetStream)
	require.ErrorContains(t, err, "JetStream is not enabled on "+ns.ClientURL())
	a.Close()
}

// syncBuffer is a log destination tests read while the app writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStart_ReplicasDiffer: an existing stream with other replicas than
// asked for is used as it is, with a warning.
func TestStart_ReplicasDiffer(t *testing.T) {
	url := natstest.Start(t)
	a := startApp(t, t.TempDir(), func(c *app.Config) { c.NATSURL = url })
	require.NoError(t, a.Close())

	var logs syncBuffer
	startApp(t, t.TempDir(), func(c *app.Config) {
		c.NATSURL = url
		c.Replicas = 3
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	def, err := streams.Transcripts()
	require.NoError(t, err)
	require.Contains(t, logs.String(), "another number of replicas than --replicas")
	require.Contains(t, logs.String(), "stream="+def.Name+" replicas=1 want=3")
}

// TestStart_ClusterElecting: a start while the cluster has no JetStream
// leader retries until it has one, instead of failing after one timeout.
func TestStart_ClusterElecting(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	c.Node("n2").Stop()
	c.Node("n3").Stop()

	var logs syncBuffer
	cfg := app.DefaultConfig()
	cfg.NATSURL = c.Node("n1").URL
	cfg.Replicas = 3
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a := app.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	opened := make(chan error, 1)
	go func() { opened <- a.Open(ctx) }()
	t.Cleanup(func() { a.Close() })

	// Depending on what n1 knows of its peers when ctxd asks, JetStream
	// answers with no leader (a timeout) or "no suitable peers for
	// placement, peer offline": both are retried.
	var early error
	require.Eventually(t, func() bool {
		select {
		case early = <-opened:
			return true
		default:
		}
		return strings.Count(logs.String(), "JetStream not available yet; retrying") >= 2
	}, 60*time.Second, 50*time.Millisecond, "the start retries: %s", logs.String())
	require.NoError(t, early, "the start ended before the cluster was whole: %s", logs.String())
	c.Node("n2").Start(t)
	c.Node("n3").Start(t)
	if early == nil {
		require.NoError(t, <-opened)
	}
}

// TestStart_ConsumerWhileNoMetaLeader: every step of a start that asks
// JetStream is retried while the cluster has no meta leader, not only the
// stream's: here the stream and the checkpoint bucket answer from their
// node, and only the ingest consumer, created anew, needs the leader that
// is missing (JetStream answers 503 or not at all).
func TestStart_ConsumerWhileNoMetaLeader(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(c.URLs())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	def, err := streams.Transcripts()
	require.NoError(t, err)
	buckets, err := streams.Checkpoints()
	require.NoError(t, err)

	// A first start makes the stream and the bucket, one replica each;
	// they are made again until one node leads both.
	var home string
	for try := 0; home == ""; try++ {
		require.Less(t, try, 40, "the stream and the bucket never landed on one node")
		a := startApp(t, t.TempDir(), func(cfg *app.Config) { cfg.NATSURL = c.URLs(); cfg.Replicas = 1 })
		require.NoError(t, a.Close())
		leaders := map[string]bool{}
		for _, name := range []string{def.Name, buckets.Name} {
			st, err := js.Stream(ctx, name)
			require.NoError(t, err)
			leaders[st.CachedInfo().Cluster.Leader] = true
			if len(leaders) == 1 {
				home = st.CachedInfo().Cluster.Leader
			}
		}
		if len(leaders) > 1 {
			home = ""
			for _, name := range []string{def.Name, buckets.Name} {
				require.NoError(t, js.DeleteStream(ctx, name))
			}
		}
	}
	require.NoError(t, js.DeleteConsumer(ctx, def.Name, streams.IngestName))
	var others []*natstest.Node
	for _, n := range c.Nodes {
		if n.Name != home {
			others = append(others, n)
			n.Stop()
		}
	}

	var logs syncBuffer
	cfg := app.DefaultConfig()
	cfg.NATSURL = c.Node(home).URL
	cfg.Replicas = 1
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	a := app.New(cfg)
	opened := make(chan error, 1)
	go func() { opened <- a.Open(ctx) }()
	t.Cleanup(func() { a.Close() })

	ended, early := false, error(nil)
	require.Eventually(t, func() bool {
		select {
		case early = <-opened:
			ended = true
			return true
		default:
		}
		return strings.Contains(logs.String(), `what="consumer `+streams.IngestName+`"`)
	}, 60*time.Second, 50*time.Millisecond, "the consumer's creation is retried: %s", logs.String())
	require.False(t, ended, "the start ended while the cluster had no meta leader (err %v): %s", early, logs.String())
	for _, n := range others {
		n.Start(t)
	}
	require.NoError(t, <-opened)
	_, err = js.Consumer(ctx, def.Name, streams.IngestName)
	require.NoError(t, err)
}
