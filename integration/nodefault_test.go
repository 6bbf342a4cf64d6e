//go:build slow

package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
)

var nodeLogs = flag.Bool("node.logs", false, "print the ctxd instances' log lines after each node fault")

var nodeRoutePing = flag.Duration("node.route-ping", 0, "the servers' route ping interval in TestCluster_NodeFaults (0: nats-server's default; see docs/PERFORMANCE.md)")

var nodeDown = flag.Duration("node.down", 5*time.Second, "how long TestCluster_NodeFaults keeps a nats-server node killed or frozen (make node-long: 20s)")

// nodeClientOpts are the load's connection options in the node faults:
// a client of a frozen server notices within about 3 s (a ping every
// second, two unanswered) and reconnects to another node, as a client of
// a cluster should be set up; with nats.go's defaults (a ping every two
// minutes) a client of a frozen node hangs for minutes, whatever ctxd does.
var nodeClientOpts = []nats.Option{nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2)}

// nodeFaults are the faults of a nats-server node, each on 2 ctxd
// instances under load on a cluster of nats-server processes: the node
// that leads the stream is SIGKILLed (or SIGSTOPped) for -node.down,
// then started again (or continued).
var nodeFaults = []struct {
	name  string
	fault func(tc *testCluster)
}{
	{"kill stream leader node", func(tc *testCluster) {
		leader := tc.c.WaitStreamLeader(tc.t, "TRANSCRIPTS")
		tc.t.Logf("%s: SIGKILL %s", time.Now().Format("15:04:05.000"), leader.Name)
		leader.Kill()
		time.Sleep(*nodeDown)
		leader.Start(tc.t)
	}},
	{"freeze stream leader node", func(tc *testCluster) {
		leader := tc.c.WaitStreamLeader(tc.t, "TRANSCRIPTS")
		tc.t.Logf("%s: SIGSTOP %s; the ingest consumer's leader is %s", time.Now().Format("15:04:05.000"), leader.Name, consumerLeader(tc))
		leader.Freeze(tc.t)
		time.Sleep(*nodeDown)
		tc.t.Logf("%s: SIGCONT %s; the ingest consumer's leader is %s", time.Now().Format("15:04:05.000"), leader.Name, consumerLeader(tc))
		leader.Thaw(tc.t)
	}},
}

// consumerLeader names the node that leads the ingest's consumer, as the
// meta leader says.
func consumerLeader(tc *testCluster) string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	js, err := jetstream.New(tc.nc)
	if err != nil {
		return err.Error()
	}
	c, err := js.Consumer(ctx, "TRANSCRIPTS", "ctxd")
	if err != nil {
		return err.Error()
	}
	if ci := c.CachedInfo().Cluster; ci != nil {
		return ci.Leader
	}
	return "?"
}

// nodeFault is clusterFault on a cluster of processes, with the load's
// clients set up for a cluster whose node may freeze.
func nodeFault(t testing.TB, c *natstest.Cluster, prefix string, fault func(tc *testCluster)) figures {
	tc := onCluster(t, c, prefix, 2)
	nc, err := nats.Connect(c.URLs(), append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, nodeClientOpts...)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	tc.nc = nc
	tc.clientOpts = nodeClientOpts
	return runFault(t, tc, 2, fault)
}

// readers starts n readers beside the writers: each reads random
// sessions of the load without pause, asking for at least the highest
// seq any reply of that session has carried (monotonic reads). A writer
// reads only once its publish is acknowledged, and publishes stop while
// the stream elects a leader; the readers go on through that, so the
// figures say how long a session could not be read whatever the
// publishes do.
func (tc *testCluster) readers(n, sessions int) {
	var mu sync.Mutex
	seen := map[string]uint64{}
	for i := range n {
		tc.wg.Add(1)
		go func() {
			defer tc.wg.Done()
			nc, err := nats.Connect(tc.urls, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, tc.clientOpts...)...)
			if err != nil {
				tc.t.Error(err)
				return
			}
			defer nc.Close()
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for !tc.stop.Load() {
				session := fmt.Sprintf("%s%d", tc.prefix, rng.IntN(sessions))
				mu.Lock()
				r := read{session: session, minSeq: seen[session]}
				mu.Unlock()
				first := time.Now()
				for {
					sent := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					data, err := ctxdclient.Context(ctx, nc, r.session, ctxdclient.Request{MinSeq: r.minSeq, WaitMS: 900})
					cancel()
					s := sample{at: sent.Sub(tc.start), took: time.Since(sent), failed: err != nil}
					if err != nil {
						s.err = errorKind(err)
						if *nodeLogs {
							tc.t.Logf("%s: reader %d on %s: %s (min_seq %d): %v", sent.Format("15:04:05.000"), i, nc.ConnectedServerName(), r.session, r.minSeq, err)
						}
						tc.samples <- s
						if time.Since(first) > 20*time.Second {
							tc.t.Errorf("session %s unreadable for 20s: %v", r.session, err)
							break
						}
						time.Sleep(10 * time.Millisecond)
						continue
					}
					s.unreadable = time.Since(first)
					tc.samples <- s
					r.data = data
					tc.reads <- r
					var head struct {
						Seq uint64 `json:"seq"`
					}
					if json.Unmarshal(data, &head) == nil {
						mu.Lock()
						seen[session] = max(seen[session], head.Seq)
						mu.Unlock()
					}
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
}

// A nats-server node of the 3-node cluster is SIGKILLed, or SIGSTOPped,
// under sustained publishes and read-your-writes reads through 2 ctxd
// instances: every reply equals Build over the session's records up to
// its seq, at or past its min_seq; the stream holds every acknowledged
// record once; rebuild --check finds nothing; no session stays
// unreadable for 20 s.
func TestCluster_NodeFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of nats-server processes under load; -short leaves it to the plain run")
	}
	c := natstest.StartProcessClusterWith(t, 3, natstest.ProcessOptions{RoutePingInterval: *nodeRoutePing})
	for i, f := range nodeFaults {
		t.Run(f.name, func(t *testing.T) {
			nodeFault(t, c, fmt.Sprintf("n%d-", i), f.fault)
		})
	}
}

// BenchmarkCluster_NodeFaults runs each node fault once, with the checks
// of TestCluster_NodeFaults, and reports what the requests saw in the
// 10 s after the fault began, as BenchmarkCluster_Faults does. Run it
// with -benchtime 1x; -node.down sets how long the node is down.
func BenchmarkCluster_NodeFaults(b *testing.B) {
	c := natstest.StartProcessClusterWith(b, 3, natstest.ProcessOptions{RoutePingInterval: *nodeRoutePing})
	for i, f := range nodeFaults {
		b.Run(f.name, func(b *testing.B) {
			var fig figures
			for j := range b.N {
				fig = nodeFault(b, c, fmt.Sprintf("bn%d-%d-", i, j), f.fault)
			}
			reportFigures(b, fig)
		})
	}
}

// runFault is clusterFault's run on a testCluster set up by the caller,
// with readers beside the writers.
func runFault(t testing.TB, tc *testCluster, readers int, fault func(tc *testCluster)) figures {
	tc.load(*clusterWriters, 16)
	tc.readers(readers, 16)
	done := make(chan struct{})
	stall := tc.watchIngest(done)
	time.Sleep(*clusterLoadFor)
	at := time.Since(tc.start)
	fault(tc)
	t.Logf("%v: fault over", time.Since(tc.start).Round(time.Millisecond))
	time.Sleep(*clusterLoadFor)
	close(done)
	waitStreamHealthy(tc)
	samples := tc.finish()
	f := faultFigures(samples, at)
	// A read that began in the window and was answered after it counts:
	// a node down longer than the window keeps sessions unreadable past
	// it. So the longest over the whole run.
	for _, s := range samples {
		if !s.failed {
			f.unreadable = max(f.unreadable, s.unreadable)
		}
	}
	f.ingestStall = stall()
	t.Logf("after the fault: %s", f)
	for _, in := range tc.instances() {
		if *nodeLogs {
			for _, line := range strings.Split(stderrOf(in.p), "\n") {
				if !strings.Contains(line, "request failed") && line != "" {
					t.Logf("instance %d: %s", in.pid, line)
				}
			}
		}
		tc.term(in)
	}
	return f
}

// waitStreamHealthy waits until the stream has a leader and every
// replica is current, so that the checks read a settled stream (a node
// just back can make the leader answer 503 for a moment).
func waitStreamHealthy(tc *testCluster) {
	js, err := jetstream.New(tc.nc)
	require.NoError(tc.t, err)
	require.Eventually(tc.t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "TRANSCRIPTS")
		if err != nil {
			return false
		}
		ci := st.CachedInfo().Cluster
		if ci == nil || ci.Leader == "" {
			return false
		}
		for _, p := range ci.Replicas {
			if !p.Current || p.Offline {
				return false
			}
		}
		return true
	}, 2*time.Minute, 100*time.Millisecond, "the stream settles after the fault")
}

// reportFigures reports a fault's figures as benchmark metrics.
func reportFigures(b *testing.B, fig figures) {
	b.ReportMetric(float64(fig.unreadable)/float64(time.Millisecond), "unreadable-ms")
	b.ReportMetric(fig.failedShare(), "failed-%")
	b.ReportMetric(float64(fig.p99)/float64(time.Millisecond), "p99-ms")
	b.ReportMetric(float64(fig.worst)/float64(time.Millisecond), "worst-ms")
	b.ReportMetric(float64(fig.ingestStall)/float64(time.Millisecond), "ingest-stall-ms")
}
