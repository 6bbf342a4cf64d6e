package natstest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	serverOnce sync.Once
	serverBin  string
	serverErr  error
)

// ServerBinary builds the nats-server of the module's own dependency
// once per test binary and returns its path: the same server as the
// embedded one, offline, from the module cache.
func ServerBinary(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		dir, err := os.MkdirTemp("", "natstest-bin-")
		if err != nil {
			serverErr = err
			return
		}
		serverBin = filepath.Join(dir, "nats-server")
		out, err := exec.Command("go", "build", "-o", serverBin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			serverErr = fmt.Errorf("go build nats-server: %v\n%s", err, out)
		}
	})
	require.NoError(t, serverErr)
	return serverBin
}

// StartProcessCluster is StartCluster with every node a nats-server
// process instead of a server in the test's process, so that a test can
// fault a node the hard way: Kill (SIGKILL: the process is gone, its
// sockets are reset, its Raft groups elect new leaders after their
// election timeout, its store is recovered at the next start) or Freeze
// (SIGSTOP: the process and its sockets stay, nothing answers, peers and
// clients notice only by their ping and write timeouts). Start and Stop
// work as for an embedded node; Stop is a SIGTERM, the server's clean
// shutdown.
func StartProcessCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartProcessClusterWith(t, n, ProcessOptions{})
}

// ProcessOptions are settings of the servers of StartProcessClusterWith
// that the embedded ones leave at nats-server's defaults.
type ProcessOptions struct {
	// RoutePingInterval, when set, is how often each server pings the
	// others over its routes (the cluster block's ping_interval, with
	// ping_max 2): a route whose peer misses two pings is dropped, and
	// with it the peer's subscriptions. nats-server's default is the
	// client ping interval, 2 minutes, at most 30 s for routes: until
	// then a frozen node's queue subscribers (the replicas that answer
	// direct gets, the service instances connected to it) go on being
	// chosen, and what is sent to them is lost.
	RoutePingInterval time.Duration
}

// StartProcessClusterWith is StartProcessCluster with the servers' options.
func StartProcessClusterWith(t testing.TB, n int, o ProcessOptions) *Cluster {
	t.Helper()
	bin := ServerBinary(t)
	ports := freePorts(t, 2*n)
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	dir := t.TempDir()
	c := &Cluster{}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		nodeDir := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(nodeDir, 0o755))
		conf := filepath.Join(nodeDir, "nats-server.conf")
		require.NoError(t, os.WriteFile(conf, []byte(processConfig(name, ports[i], ports[n+i], nodeDir, routes, o)), 0o644))
		node := &Node{Name: name, URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]),
			proc: &serverProc{bin: bin, conf: conf, log: filepath.Join(nodeDir, "nats-server.log"), port: ports[i]}}
		c.Nodes = append(c.Nodes, node)
		t.Cleanup(node.Kill)
		node.Start(t)
	}
	c.WaitMetaLeader(t)
	return c
}

// processConfig is a node's configuration file: what natsd.New and
// StartCluster give an embedded node.
func processConfig(name string, port, clusterPort int, dir string, routes []string, o ProcessOptions) string {
	extra := ""
	if o.RoutePingInterval > 0 {
		extra = fmt.Sprintf("\n  ping_interval: %q\n  ping_max: 2", o.RoutePingInterval.String())
	}
	return fmt.Sprintf(`server_name: %q
listen: "127.0.0.1:%d"
max_payload: %d
jetstream {
  store_dir: %q
}
cluster {
  name: "ctxd-test"
  listen: "127.0.0.1:%d"
  routes: [%s]%s
}
`, name, port, 8<<20, filepath.Join(dir, "store"), clusterPort, `"`+strings.Join(routes, `", "`)+`"`, extra)
}

// serverProc is the process of a node started by StartProcessCluster.
type serverProc struct {
	bin, conf, log string
	port           int

	cmd    *exec.Cmd // nil while stopped
	done   chan struct{}
	frozen bool
}

func (p *serverProc) start(t testing.TB, name string) {
	t.Helper()
	cmd := exec.Command(p.bin, "-c", p.conf, "-l", p.log)
	require.NoError(t, cmd.Start(), "start node %s", name)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.port), time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-done:
			log, _ := os.ReadFile(p.log)
			t.Fatalf("node %s exited at start: %s", name, lastLines(string(log), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not accepting connections after 30s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signal sends sig to the process and, for SIGTERM and SIGKILL, waits
// until it has exited.
func (p *serverProc) signal(sig syscall.Signal) {
	if p.cmd == nil {
		return
	}
	if p.frozen && sig != syscall.SIGSTOP {
		p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process does not act on SIGTERM
		p.frozen = false
	}
	p.cmd.Process.Signal(sig)
	switch sig {
	case syscall.SIGSTOP:
		p.frozen = true
	case syscall.SIGTERM, syscall.SIGKILL:
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		p.cmd = nil
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Kill SIGKILLs the node's process, if it runs, and waits until it is
// gone: no handover of leaderships, no clean close of its connections
// beyond what the kernel does, no flush of its store. For an embedded
// node it is Stop.
func (n *Node) Kill() {
	if n.proc == nil {
		n.Stop()
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.proc.signal(syscall.SIGKILL)
}

// Freeze SIGSTOPs the node's process: it keeps its sockets open and
// answers nothing, as a hung machine or a long pause would, until Thaw.
// Only for a node of StartProcessCluster.
func (n *Node) Freeze(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	require.NotNil(t, n.proc, "node %s runs in the test's process: it cannot be frozen", n.Name)
	require.NotNil(t, n.proc.cmd, "node %s is not running", n.Name)
	n.proc.signal(syscall.SIGSTOP)
}

// Thaw SIGCONTs a node frozen by Freeze.
func (n *Node) Thaw(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	require.NotNil(t, n.proc, "node %s runs in the test's process", n.Name)
	if n.proc.cmd != nil && n.proc.frozen {
		n.proc.cmd.Process.Signal(syscall.SIGCONT)
		n.proc.frozen = false
	}
}

// Log returns the last lines of the node's log, for a node of
// StartProcessCluster.
func (n *Node) Log(lines int) string {
	if n.proc == nil {
		return ""
	}
	b, _ := os.ReadFile(n.proc.log)
	return lastLines(string(b), lines)
}
