package natstest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/natsd"
)

// Cluster is a JetStream cluster of embedded servers in the test's
// process, on loopback. Every node keeps its name, ports and store
// directory for the whole test, so a node stopped and started again
// rejoins the cluster as the same server and catches up.
type Cluster struct {
	Nodes []*Node
}

// Node is one server of a Cluster.
type Node struct {
	// Name is the server's name, as a stream's info names its leader and
	// replicas.
	Name string
	// URL is the node's client URL, the same across restarts.
	URL string

	mu  sync.Mutex
	srv *natsd.Server // nil while stopped
	cfg natsd.Server  // what every start of the node opens

	proc *serverProc // set for a node of StartProcessCluster, which runs as a process
}

// clusterWait bounds the waits for leaders: a first meta leader takes
// the servers' election timeout, 4 to 9 seconds.
const clusterWait = 60 * time.Second

// StartCluster starts n servers (n1 ... nn) in one cluster, each with
// JetStream and a store in the test's temporary directory, and returns
// once the cluster has elected its meta leader, so streams can be
// created. The servers are stopped when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	ports := freePorts(t, 2*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	dir := t.TempDir()
	c := &Cluster{}
	for i := range n {
		cfg := natsd.New(filepath.Join(dir, fmt.Sprintf("n%d", i+1)))
		cfg.Name = fmt.Sprintf("n%d", i+1)
		cfg.Port = ports[i]
		cfg.Cluster = natsd.Cluster{Name: "ctxd-test", Host: "127.0.0.1", Port: ports[n+i], Routes: routes}
		node := &Node{Name: cfg.Name, URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]), cfg: *cfg}
		c.Nodes = append(c.Nodes, node)
		t.Cleanup(node.Stop)
		node.Start(t)
	}
	c.WaitMetaLeader(t)
	return c
}

// freePorts returns n distinct ports free on loopback now, below the
// ephemeral range (32768 and up on Linux), as nats-server's own cluster
// tests choose theirs: no outgoing connection takes one while its node
// is stopped, so a restarted node gets its ports back.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		require.Less(t, tries, 1000, "no free ports")
		p := 20000 + rand.IntN(12000)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		ports = append(ports, p)
	}
	return ports
}

// Start starts the node, which must be stopped: the same server again,
// on its ports and store directory. It rejoins its cluster and catches
// up with what it missed in the background.
func (n *Node) Start(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		require.Nil(t, n.proc.cmd, "node %s is running", n.Name)
		n.proc.start(t, n.Name)
		return
	}
	require.Nil(t, n.srv, "node %s is running", n.Name)
	srv := n.cfg
	require.NoError(t, srv.Open(), "start node %s", n.Name)
	n.srv = &srv
}

// Stop shuts the node down, if it runs, and waits until it has stopped.
//
// It is the in-process stand-in for killing the server, and gentler than
// a SIGKILL or a power cut: the server first hands the leadership of
// every Raft group it leads (the meta layer, streams, consumers) to
// another node, so new leaders are there within milliseconds instead of
// after a 4-9 s election timeout; it closes its client and route
// connections, so peers and clients notice at once, as they would for a
// killed process but not for a dead machine or a cut network (then only
// ping timeouts tell); and it writes its store out cleanly, so a restart
// recovers nothing. For a node of StartProcessCluster it is a SIGTERM,
// the same clean shutdown in the server's process.
func (n *Node) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		n.proc.signal(syscall.SIGTERM)
		return
	}
	if n.srv != nil {
		n.srv.Close()
		n.srv = nil
	}
}

// Running reports whether the node runs.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		return n.proc.cmd != nil
	}
	return n.srv != nil
}

// URLs returns the client URLs of every node, comma separated, as
// nats.Connect takes them.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL
	}
	return strings.Join(urls, ",")
}

// Node returns the node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Connect connects to the cluster, any node, for the test's duration.
func (c *Cluster) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// WaitMetaLeader waits until the cluster's meta layer has a leader, the
// one that answers JetStream's account and stream management requests.
func (c *Cluster) WaitMetaLeader(t testing.TB) {
	t.Helper()
	js, err := jetstream.New(c.Connect(t))
	require.NoError(t, err)
	c.wait(t, "a meta leader", func(ctx context.Context) (bool, error) {
		_, err := js.AccountInfo(ctx)
		return err == nil, err
	})
}

// WaitStreamLeader waits until the cluster has a meta leader and the
// stream called name has a leader, and returns the leader's node.
func (c *Cluster) WaitStreamLeader(t testing.TB, name string) *Node {
	t.Helper()
	js, err := jetstream.New(c.Connect(t))
	require.NoError(t, err)
	var leader *Node
	c.wait(t, "a leader of stream "+name, func(ctx context.Context) (bool, error) {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return false, err
		}
		if ci := st.CachedInfo().Cluster; ci != nil && ci.Leader != "" {
			leader = c.Node(ci.Leader)
		}
		if leader == nil {
			return false, errors.New("no leader")
		}
		return true, nil
	})
	return leader
}

// wait polls ready until it says yes, and fails the test with ready's
// last error after clusterWait.
func (c *Cluster) wait(t testing.TB, what string, ready func(context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(clusterWait)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var ok bool
		ok, err = ready(ctx)
		cancel()
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("cluster: no %s after %v: %v", what, clusterWait, err)
}
