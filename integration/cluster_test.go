//go:build slow

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/bus"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

var (
	clusterLoadFor = flag.Duration("cluster.load", 2*time.Second, "load before and after each fault in the TestCluster tests (make cluster-long: 10s)")
	clusterWriters = flag.Int("cluster.writers", 4, "concurrent writers in the TestCluster tests")
)

// A ctxd instance running as a process against the test's cluster.
type instance struct {
	p   *proc
	pid int
}

// testCluster is a 3-node JetStream cluster in the test process, ctxd
// instances as processes, and writers that publish and read their
// writes through whichever instance answers.
type testCluster struct {
	t      testing.TB
	c      *natstest.Cluster
	urls   string
	nc     *nats.Conn
	prefix string // of the sessions written
	// clientOpts are added to the writers' connection options.
	clientOpts []nats.Option
	// partitions of the stream, given to every instance (0: none).
	partitions int

	mu    sync.Mutex
	insts []*instance

	stop     atomic.Bool
	wg       sync.WaitGroup
	outcomes chan outcome
	reads    chan read
	samples  chan sample
	start    time.Time
}

// sample is one request of the load: when it was sent, how long it took,
// whether it failed, and how long its session had been unreadable when
// it was answered (from the first attempt of the read it belongs to).
type sample struct {
	at         time.Duration // since the load started
	took       time.Duration
	failed     bool
	err        string        // why it failed
	unreadable time.Duration // for the attempt that succeeded
}

func startTestCluster(t testing.TB, instances int) *testCluster {
	return onCluster(t, natstest.StartCluster(t, 3), "c", instances)
}

// onCluster runs instances on a cluster, which may hold what earlier
// tests wrote; the load writes sessions named prefix<n>.
func onCluster(t testing.TB, c *natstest.Cluster, prefix string, instances int) *testCluster {
	return onClusterP(t, c, prefix, instances, 0)
}

// onClusterP is onCluster on a stream of the given partitions.
func onClusterP(t testing.TB, c *natstest.Cluster, prefix string, instances, partitions int) *testCluster {
	tc := &testCluster{t: t, c: c, urls: c.URLs(), prefix: prefix, partitions: partitions,
		outcomes: make(chan outcome, 1<<18), reads: make(chan read, 1<<18), samples: make(chan sample, 1<<20)}
	tc.nc = c.Connect(t)
	// A failed test shows why every instance still running failed a
	// request with a 500 (those that stopped showed it in forget).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, in := range tc.instances() {
			for _, line := range strings.Split(stderrOf(in.p), "\n") {
				if strings.Contains(line, "request failed") {
					t.Logf("instance %d: %s", in.pid, line)
				}
			}
		}
	})
	for range instances {
		tc.startInstance()
	}
	return tc
}

func (tc *testCluster) startInstance() *instance { return tc.startInstanceOn(tc.urls) }

// startInstanceOn starts an instance given urls, the cluster's or one
// node's (it learns the others from it).
func (tc *testCluster) startInstanceOn(urls string) *instance {
	args := []string{"--nats", urls, "--replicas", "3", "--cache-sessions", "8"}
	if tc.partitions > 1 {
		args = append(args, "--partitions", strconv.Itoa(tc.partitions))
	}
	p := startProcess(tc.t, args...)
	in := &instance{p: p, pid: p.cmd.Process.Pid}
	tc.mu.Lock()
	tc.insts = append(tc.insts, in)
	tc.mu.Unlock()
	return in
}

// kill SIGKILLs an instance and forgets it.
func (tc *testCluster) kill(in *instance) {
	require.NoError(tc.t, in.p.cmd.Process.Signal(syscall.SIGKILL))
	in.p.wait(tc.t)
	tc.forget(in)
}

// term stops an instance with SIGTERM, which drains it, and forgets it.
func (tc *testCluster) term(in *instance) {
	require.NoError(tc.t, in.p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(tc.t, in.p.wait(tc.t), "exit status after SIGTERM: %s", in.p.stderr)
	tc.forget(in)
}

// forget drops an instance that stopped, logging the requests it failed
// with a 500 (the service logs those, with why).
func (tc *testCluster) forget(in *instance) {
	for _, line := range strings.Split(stderrOf(in.p), "\n") {
		if strings.Contains(line, "request failed") {
			tc.t.Logf("instance %d: %s", in.pid, line)
		}
	}
	tc.mu.Lock()
	tc.insts = slices.DeleteFunc(tc.insts, func(x *instance) bool { return x == in })
	tc.mu.Unlock()
}

func (tc *testCluster) instances() []*instance {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return slices.Clone(tc.insts)
}

// stats asks every instance for its $SRV.STATS.
func (tc *testCluster) stats() []instanceStats {
	inbox := nats.NewInbox()
	sub, err := tc.nc.SubscribeSync(inbox)
	require.NoError(tc.t, err)
	defer sub.Unsubscribe()
	require.NoError(tc.t, tc.nc.PublishRequest("$SRV.STATS.ctxd", inbox, nil))
	var out []instanceStats
	for {
		m, err := sub.NextMsg(300 * time.Millisecond)
		if err != nil {
			return out
		}
		var reply struct {
			Endpoints []struct {
				Name string        `json:"name"`
				Data instanceStats `json:"data"`
			} `json:"endpoints"`
		}
		if json.Unmarshal(m.Data, &reply) == nil && len(reply.Endpoints) > 0 {
			out = append(out, reply.Endpoints[0].Data)
		}
	}
}

// owner waits until exactly one instance says it holds the ingest, and
// returns it.
func (tc *testCluster) owner() *instance {
	var found *instance
	require.Eventually(tc.t, func() bool {
		found = nil
		var owners []string
		for _, s := range tc.stats() {
			if s.Role == "ingest" {
				owners = append(owners, s.Instance)
			}
		}
		if len(owners) != 1 {
			return false
		}
		for _, in := range tc.instances() {
			if strings.HasSuffix(owners[0], ":"+strconv.Itoa(in.pid)) {
				found = in
			}
		}
		return found != nil
	}, 30*time.Second, 50*time.Millisecond, "waiting for one ingest owner")
	return found
}

// load starts the writers: each publishes turns to random sessions and
// reads its write back with min_seq, or reads another session as it is.
func (tc *testCluster) load(writers, sessions int) {
	tc.start = time.Now()
	// A test that stops early (a require that failed) still stops its
	// writers before it ends: one that reported after the end would
	// panic and take the rest of the package's tests with it.
	tc.t.Cleanup(func() {
		tc.stop.Store(true)
		tc.wg.Wait()
	})
	for w := range writers {
		tc.wg.Add(1)
		go tc.writer(w, sessions)
	}
}

func (tc *testCluster) writer(w, sessions int) {
	defer tc.wg.Done()
	t := tc.t
	nc, err := nats.Connect(tc.urls, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, tc.clientOpts...)...)
	if err != nil {
		t.Error(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	gen := workload.New(uint64(w), workload.Default.WithScreenshots(64, 10))
	n := 0
	for turn := 0; !tc.stop.Load(); turn++ {
		session := fmt.Sprintf("%s%d", tc.prefix, rng.IntN(sessions))
		recs := gen.Next()
		if rng.IntN(10) == 0 {
			recs = []any{gen.Compaction([]any{gen.User(), gen.Answer()})}
		}
		var lastAck uint64
		for _, v := range recs {
			rid := fmt.Sprintf("%sw%d-%d", tc.prefix, w, n) // unique on the stream: a message id seen before is a duplicate
			n++
			v.(*record.Map).Set("rid", rid)
			data, err := record.MarshalJSON(v)
			if err != nil {
				t.Error(err)
				return
			}
			o := outcome{rid: rid, session: session, data: data, state: "failed"}
			// Retried with the same message id until acknowledged or
			// known failed: a node that stops takes a publish in flight
			// with it.
			for try := 0; try < 20; try++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				ack, err := js.Publish(ctx, "transcripts."+session, data, jetstream.WithMsgID(rid))
				cancel()
				if err == nil {
					o.seq, o.state = ack.Sequence, "acked"
					lastAck = ack.Sequence
					break
				}
				o.state = "unknown"
				time.Sleep(50 * time.Millisecond)
			}
			tc.outcomes <- o
		}
		r := read{session: session, minSeq: lastAck}
		if turn%2 == 1 || lastAck == 0 {
			r = read{session: fmt.Sprintf("%s%d", tc.prefix, rng.IntN(sessions))}
		}
		first := time.Now()
		for !tc.stop.Load() || time.Since(first) < 20*time.Second {
			sent := time.Now()
			// A request in flight to an instance that dies gets no answer:
			// the client gives up after a second and asks again.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			// On a partitioned stream two of three requests go to the
			// partition's owner first (ctxd.p.<k>.<session>).
			parts := 0
			if turn%3 != 0 {
				parts = tc.partitions
			}
			data, err := ctxdclient.Context(ctx, nc, r.session, ctxdclient.Request{MinSeq: r.minSeq, WaitMS: 900, Partitions: parts})
			cancel()
			s := sample{at: sent.Sub(tc.start), took: time.Since(sent), failed: err != nil}
			if err == nil {
				s.unreadable = time.Since(first)
			} else {
				s.err = errorKind(err)
			}
			tc.samples <- s
			if err == nil {
				r.data = data
				tc.reads <- r
				break
			}
			if time.Since(first) > 20*time.Second {
				t.Errorf("session %s unreadable for 20s: %v", r.session, err)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// finish stops the load and checks everything: the stream holds every
// acknowledged record once; every reply of the load, and one more per
// session through each instance, equals Build over the session's records
// up to its seq, at or past its min_seq; rebuild --check finds no
// difference. It returns the samples for the figures.
func (tc *testCluster) finish() []sample {
	t := tc.t
	tc.stop.Store(true)
	tc.wg.Wait()
	close(tc.outcomes)
	close(tc.reads)
	close(tc.samples)

	bySession := map[string][]outcome{}
	counts := map[string]int{}
	for o := range tc.outcomes {
		counts[o.state]++
		bySession[o.session] = append(bySession[o.session], o)
	}
	require.Greater(t, counts["acked"], 50, "the load was too light to mean anything")

	var rc reconciled
	truth := map[string][]projection.Record{}
	lastSeq := map[string]uint64{}
	for session, outs := range bySession {
		byRid := map[string][]storedRecord{}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		// Wherever the stream stores the session: on a stream partitioned
		// under the load, on both its subjects.
		stream, err := bus.OpenStream(ctx, tc.nc, "TRANSCRIPTS")
		require.NoError(t, err)
		err = stream.ReadSession(ctx, session, 1, ^uint64(0), func(seq uint64, data []byte) error {
			v, err := record.Decode(data)
			require.NoError(t, err)
			rid, _ := v.String("rid")
			byRid[rid] = append(byRid[rid], storedRecord{seq, bytes.Clone(data)})
			lastSeq[session] = seq
			return nil
		})
		cancel()
		require.NoError(t, err)
		truth[session] = reconcile(t, outs, byRid, &rc)
	}

	var during []read
	for r := range tc.reads {
		during = append(during, r)
	}
	// One read per session per instance: several requests, spread by the
	// queue group over the instances.
	var after []read
	for session := range bySession {
		for range len(tc.instances()) + 1 {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			data, err := ctxdclient.Context(ctx, tc.nc, session, ctxdclient.Request{MinSeq: lastSeq[session], WaitMS: 15000})
			cancel()
			require.NoError(t, err, session)
			after = append(after, read{session: session, minSeq: lastSeq[session], data: data})
		}
	}
	var wrong int
	for _, r := range append(slices.Clone(during), after...) {
		if problem := checkReply(t, r, truth[r.session]); problem != "" {
			wrong++
			if wrong <= 5 {
				t.Errorf("%s (min_seq %d): %s", r.session, r.minSeq, problem)
			}
		}
	}
	t.Logf("%v: replies checked", time.Since(tc.start).Round(time.Millisecond))
	out, err := exec.Command(ctxdBinary(t), "rebuild", "--check", "--nats", tc.urls).CombinedOutput()
	require.NoError(t, err, "rebuild --check: %s", out)
	require.Contains(t, string(out), "no differences")

	var samples []sample
	for s := range tc.samples {
		samples = append(samples, s)
	}
	t.Logf("load: sessions=%d publishes acked=%d unknown=%d failed=%d, stored without an acknowledgement=%d",
		len(bySession), counts["acked"], counts["unknown"], counts["failed"], rc.storedUnacked)
	t.Logf("ctxd: replies checked=%d (during the load %d, after it %d) wrong=%d; requests=%d",
		len(during)+len(after), len(during), len(after), wrong, len(samples))
	require.NotZero(t, len(during), "reads during the load")
	require.Zero(t, wrong, "replies that differ from Build over the session's records up to their seq")
	require.Zero(t, rc.lost, "acknowledged records not in the stream at their sequence")
	require.Zero(t, rc.duplicated, "records stored more than once despite their message id")
	require.Zero(t, rc.unexpected, "records in the stream that nobody published")
	return samples
}

// errorKind names a failed request's error for the figures: the client's
// connection lost (and not back in time), a timeout (no answer: the
// request went to an instance that died or stalled), or the service's
// error code.
func errorKind(err error) string {
	switch {
	case errors.Is(err, ctxdclient.ErrConnectionLost):
		return "connection lost"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, nats.ErrNoResponders):
		return "no responders"
	}
	var se *ctxdclient.Error
	if errors.As(err, &se) {
		return se.Code
	}
	return err.Error()
}

// figures are what the load saw in the 10 s after a fault.
type figures struct {
	requests, failed int
	why              map[string]int // failed requests by error
	unreadable       time.Duration  // the longest a read waited for its session
	p99, worst       time.Duration  // of the requests answered
	ingestStall      time.Duration  // the longest the ingest applied nothing, over the whole run
}

func (f figures) String() string {
	return fmt.Sprintf("requests=%d failed=%d (%.2f%%, %v) longest unreadable=%v p99=%v worst=%v; ingest stalled at most %v",
		f.requests, f.failed, f.failedShare(), f.why, f.unreadable.Round(time.Millisecond), f.p99.Round(time.Microsecond), f.worst.Round(time.Microsecond), f.ingestStall.Round(time.Millisecond))
}

func (f figures) failedShare() float64 { return 100 * float64(f.failed) / float64(max(f.requests, 1)) }

// faultFigures says what the load saw from a fault at `at` on.
func faultFigures(samples []sample, at time.Duration) figures {
	f := figures{why: map[string]int{}}
	var took []time.Duration
	for _, s := range samples {
		if s.at < at || s.at > at+10*time.Second {
			continue
		}
		f.requests++
		if s.failed {
			f.failed++
			f.why[s.err]++
			continue
		}
		took = append(took, s.took)
		f.unreadable = max(f.unreadable, s.unreadable)
	}
	_, f.p99 = percentiles(took)
	f.worst = slices.Max(append(took, 0))
	return f
}

// ingestStall watches the instances' watermarks until stop, and returns
// the longest time the ingest applied nothing while the stream had more.
func (tc *testCluster) watchIngest(done <-chan struct{}) func() time.Duration {
	var longest time.Duration
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var applied uint64
		since := time.Now()
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var top uint64
			for _, s := range tc.stats() {
				if s.Role == "ingest" {
					top = max(top, s.Applied)
				}
			}
			if top > applied {
				applied, since = top, time.Now()
				continue
			}
			longest = max(longest, time.Since(since))
		}
	}()
	return func() time.Duration { <-finished; return longest }
}

// Two instances on one stream answer every request, and the same: the
// ingest is pinned to one of them, the other reads the session's tail.
// (Before, both pulled from the shared consumer and split the records:
// of ten requests with min_seq the last record, five were 504s.)
func TestCluster_TwoInstancesDoNotSplitRecords(t *testing.T) {
	tc := startTestCluster(t, 2)
	c := newClient(t, tc.c.Nodes[0].URL)
	var recs []projection.Record
	var last uint64
	for i := range 105 {
		v := record.NewMap("role", "user", "content", fmt.Sprintf("m%d", i))
		last = c.publishValue("s6", v, false)
		recs = append(recs, projection.Record{Seq: last, Value: v})
	}
	want := projection.Build(recs, projection.Options{})
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		data, err := ctxdclient.Context(ctx, tc.nc, "s6", ctxdclient.Request{MinSeq: last, WaitMS: 200})
		cancel()
		require.NoError(t, err, "request %d", i)
		got := decodeReply(t, data)
		require.Equal(t, last, got.Seq, "request %d", i)
		requireMessages(t, want.Messages, got.Messages)
	}
	// Without min_seq, too: never an earlier seq.
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		data, err := ctxdclient.Context(ctx, tc.nc, "s6", ctxdclient.Request{})
		cancel()
		require.NoError(t, err, "request %d", i)
		require.Equal(t, last, decodeReply(t, data).Seq, "request %d", i)
	}
	owner := tc.owner()
	roles := map[string]int{}
	for _, s := range tc.stats() {
		roles[s.Role]++
		require.NotEmpty(t, s.Instance, "$SRV.STATS names the instance")
	}
	require.Equal(t, map[string]int{"ingest": 1, "reader": 1}, roles)
	msg := c.request("ctxd.rejected", nil, nil)
	require.NotEmpty(t, msg.Header.Get("Ctxd-Instance"), "ctxd.rejected names the instance")

	// The owner stops: the other takes the pin at once (it is unpinned),
	// and serves what is published next.
	tc.term(owner)
	// The other answers the latest at once, before any new record.
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		data, err := ctxdclient.Context(ctx, tc.nc, "s6", ctxdclient.Request{})
		cancel()
		require.NoError(t, err, "request %d after the owner stopped", i)
		require.Equal(t, last, decodeReply(t, data).Seq, "request %d after the owner stopped", i)
	}
	v := record.NewMap("role", "user", "content", "after the owner stopped")
	last = c.publishValue("s6", v, false)
	recs = append(recs, projection.Record{Seq: last, Value: v})
	r := c.fetchSeq("s6", last, false)
	require.Equal(t, last, r.Seq)
	requireMessages(t, projection.Build(recs, projection.Options{}).Messages, r.Messages)
	tc.owner()
}

// clusterFault runs the load on n instances, applies the fault, keeps
// the load on, checks everything, and returns what the requests saw in
// the 10 s after the fault.
func clusterFault(t testing.TB, c *natstest.Cluster, prefix string, n int, fault func(tc *testCluster)) figures {
	tc := onCluster(t, c, prefix, n)
	tc.load(*clusterWriters, 16)
	done := make(chan struct{})
	stall := tc.watchIngest(done)
	time.Sleep(*clusterLoadFor)
	at := time.Since(tc.start)
	fault(tc)
	time.Sleep(*clusterLoadFor)
	close(done)
	t.Logf("%v: load stopped", time.Since(tc.start).Round(time.Millisecond))
	samples := tc.finish()
	t.Logf("%v: checked", time.Since(tc.start).Round(time.Millisecond))
	f := faultFigures(samples, at)
	f.ingestStall = stall()
	t.Logf("after the fault: %s", f)
	for _, in := range tc.instances() {
		tc.term(in)
	}
	t.Logf("%v: stopped", time.Since(tc.start).Round(time.Millisecond))
	return f
}

// clusterFaults are the faults of TestCluster_Faults and
// BenchmarkCluster_Faults: each on n instances under load.
var clusterFaults = []struct {
	name  string
	n     int
	fault func(tc *testCluster)
}{
	{"kill owner of 2", 2, func(tc *testCluster) { tc.kill(tc.owner()) }},
	{"kill owner of 3", 3, func(tc *testCluster) { tc.kill(tc.owner()) }},
	{"kill reader of 3", 3, func(tc *testCluster) {
		owner := tc.owner()
		for _, in := range tc.instances() {
			if in != owner {
				tc.kill(in)
				return
			}
		}
	}},
	{"rolling restart of 3", 3, func(tc *testCluster) {
		for _, in := range tc.instances() {
			tc.term(in)
			tc.startInstance()
		}
	}},
	// The owner stops (SIGSTOP) past the pinned TTL: JetStream pins
	// another instance. When the old owner runs again its pulls are
	// refused (pin id mismatch) and it answers by reading the stream
	// from then on; the requests it had queued meanwhile are answered
	// from what it had applied, which their seq says.
	{"stall owner of 2", 2, func(tc *testCluster) {
		owner := tc.owner()
		require.NoError(tc.t, owner.p.cmd.Process.Signal(syscall.SIGSTOP))
		time.Sleep(5 * time.Second) // past the 3 s pinned TTL
		require.NoError(tc.t, owner.p.cmd.Process.Signal(syscall.SIGCONT))
		require.Eventually(tc.t, func() bool {
			return strings.Contains(stderrOf(owner.p), "ingest pin lost")
		}, 20*time.Second, 20*time.Millisecond, "the old owner notices it lost the pin")
		require.NotSame(tc.t, owner, tc.owner(), "another instance ingests")
	}},
	// The node that leads the stream stops (in process: it hands its
	// leaderships over first) and starts again.
	{"stop stream leader node", 2, func(tc *testCluster) {
		leader := tc.c.WaitStreamLeader(tc.t, "TRANSCRIPTS")
		leader.Stop()
		time.Sleep(*clusterLoadFor / 2)
		leader.Start(tc.t)
	}},
}

// Instances on one 3-node cluster, under sustained publishes and
// read-your-writes reads, through each fault in turn (fresh instances
// and sessions each time, one stream): every reply equals Build over the
// session's records up to its seq, at or past its min_seq; the stream
// holds every acknowledged record once; rebuild --check finds nothing.
func TestCluster_Faults(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of load on a cluster; -short (the race detector's run) leaves it to the plain run")
	}
	c := natstest.StartCluster(t, 3)
	for i, f := range clusterFaults {
		t.Run(f.name, func(t *testing.T) {
			clusterFault(t, c, fmt.Sprintf("f%d-", i), f.n, f.fault)
		})
	}
}

// stderrOf returns what a process wrote to its standard error so far.
func stderrOf(p *proc) string {
	w := p.cmd.Stderr.(*syncWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// BenchmarkCluster_Faults runs each fault of the TestCluster tests once,
// under load, with the same checks, and reports what the requests saw
// in the 10 s after it: the longest a read waited for its session
// (unreadable-ms), the share of requests that failed, their p99 and
// worst, and the longest the ingest applied nothing. Run it with
// -benchtime 1x; -cluster.load sets the load before and after the fault.
func BenchmarkCluster_Faults(b *testing.B) {
	c := natstest.StartCluster(b, 3)
	for i, f := range clusterFaults {
		b.Run(f.name, func(b *testing.B) {
			var fig figures
			for j := range b.N {
				fig = clusterFault(b, c, fmt.Sprintf("b%d-%d-", i, j), f.n, f.fault)
			}
			b.ReportMetric(float64(fig.unreadable)/float64(time.Millisecond), "unreadable-ms")
			b.ReportMetric(fig.failedShare(), "failed-%")
			b.ReportMetric(float64(fig.p99)/float64(time.Millisecond), "p99-ms")
			b.ReportMetric(float64(fig.worst)/float64(time.Millisecond), "worst-ms")
			b.ReportMetric(float64(fig.ingestStall)/float64(time.Millisecond), "ingest-stall-ms")
		})
	}
}

// BenchmarkCluster_Fetch compares a context fetch of a 200-record session
// with one 200 KB screenshot, from 1 and from 3 ctxd instances on a
// 3-node cluster (R3 stream), against a bare NATS request-reply of the
// same bytes, interleaved request by request. Instance i and a bare
// responder sit on node i (the responders in one queue group, as the
// instances are), the client on node 1: both paths cross the same routes.
// The bare responders of the ratios are processes of their own, as the
// instances are (bare_test.go); those in the benchmark's own process,
// beside the embedded servers, are reported too (inproc-*): a request to
// them wakes no other process, and on two cores their p99 is about half.
// Requests are plain (unrouted): with 3 instances two of three reach an
// instance that does not hold the ingest pin.
//
// Two cases: "fetch" asks for that session as it is; "turn" is what an
// agent does each turn: it publishes a record to its session, then asks
// with min_seq its PubAck's sequence (read-your-writes), and the bare
// request beside it gets the bytes of that reply. Only the requests are
// timed, not the publish. The turns alternate user and assistant
// messages, with a compaction every 100th, so that the context stays
// between 1 and about 40 KB however many turns are run.
//
//	go test ./integration -run '^$' -bench '^BenchmarkCluster_Fetch$' -benchtime 2000x -timeout 30m
func BenchmarkCluster_Fetch(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("%d instances", n), func(b *testing.B) {
			c := natstest.StartCluster(b, 3)
			tc := onCluster(b, c, "bench", 0)
			// The stream first, with its replicas, then the instances.
			tc.startInstanceOn(c.Nodes[0].URL)
			for i := 1; i < n; i++ {
				tc.startInstanceOn(c.Nodes[i].URL)
			}
			defer func() {
				for _, in := range tc.instances() {
					tc.term(in)
				}
			}()
			cl := newClient(b, c.Nodes[0].URL)
			gen := workload.New(1, workload.Default.WithScreenshots(200<<10, 200))
			var last uint64
			for _, r := range gen.Records(200) {
				last = cl.publishValue("bench", r, false)
			}
			// The session of the turns starts with a compaction.
			last = cl.publishValue("turn", gen.Compaction([]any{gen.User(), gen.Answer()}), false)
			tc.owner()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			first, err := ctxdclient.Context(ctx, cl.nc, "bench", ctxdclient.Request{MinSeq: last, WaitMS: 10000})
			cancel()
			require.NoError(b, err)
			// Every instance has the sessions loaded.
			for range 10 * n {
				cl.request("ctxd.context.bench", nil, nil)
				cl.request("ctxd.context.turn", nil, nil)
			}
			var body atomic.Pointer[[]byte] // what the bare responders answer
			body.Store(&first)
			for i := range n {
				server := natstest.Connect(b, c.Nodes[i].URL)
				sub, err := server.QueueSubscribe("bare.bench", "bare", func(m *nats.Msg) { m.Respond(*body.Load()) })
				require.NoError(b, err)
				defer sub.Unsubscribe()
				require.NoError(b, server.Flush())
			}
			// The same, each a process of its own on node i, as the
			// instances are (bare_test.go): the baseline of the ratios.
			var procs []*bareProcess
			for i := range n {
				p := startBare(b, cl.nc, c.Nodes[i].URL, "bareproc.bench", "bareproc")
				p.set(b, first)
				procs = append(procs, p)
			}
			turns := 0
			run := func(b *testing.B, turn bool) {
				ctxdMsg := &nats.Msg{Subject: "ctxd.context.bench"}
				if turn {
					ctxdMsg.Subject = "ctxd.context.turn"
				}
				bareMsg := &nats.Msg{Subject: "bare.bench"}
				procMsg := &nats.Msg{Subject: "bareproc.bench"}
				var ctxdLat, bareLat, procLat []time.Duration
				procBody := *body.Load() // what the bare processes answer
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					var minSeq uint64
					if turn {
						b.StopTimer()
						var v any
						switch {
						case turns%100 == 0:
							v = gen.Compaction([]any{gen.User(), gen.Answer()})
						case turns%2 == 0:
							v = gen.User()
						default:
							v = gen.Answer()
						}
						turns++
						procBody = *body.Load()
						for _, p := range procs {
							p.set(b, procBody)
						}
						minSeq = cl.publishValue("turn", v, false)
						ctxdMsg.Data = fmt.Appendf(ctxdMsg.Data[:0], `{"min_seq":%d}`, minSeq)
						b.StartTimer()
					}
					order := []*nats.Msg{ctxdMsg, bareMsg, procMsg}
					for j := range order {
						m := order[(i+j)%len(order)]
						start := time.Now()
						reply, err := cl.nc.RequestMsg(m, 10*time.Second)
						d := time.Since(start)
						if err != nil {
							b.Fatalf("request %s: %v", m.Subject, err)
						}
						if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
							b.Fatalf("request %s: %s %s", m.Subject, code, reply.Header.Get("Nats-Service-Error"))
						}
						if m == ctxdMsg {
							if turn {
								if got := replySeq(reply.Data); got < minSeq {
									b.Fatalf("turn %d: seq %d, below min_seq %d", i, got, minSeq)
								}
								data := reply.Data
								body.Store(&data)
							}
							ctxdLat = append(ctxdLat, d)
						} else if m == procMsg {
							procLat = append(procLat, d)
						} else {
							bareLat = append(bareLat, d)
						}
						want := len(*body.Load())
						if m == procMsg {
							want = len(procBody)
						}
						if len(reply.Data) != want && !(turn && m == ctxdMsg) {
							b.Fatalf("request %s: %d bytes, want %d", m.Subject, len(reply.Data), want)
						}
					}
				}
				b.StopTimer()
				cp50, cp99 := percentiles(ctxdLat)
				bp50, bp99 := percentiles(bareLat)
				pp50, pp99 := percentiles(procLat)
				b.ReportMetric(us(cp50), "ctxd-p50-µs")
				b.ReportMetric(us(cp99), "ctxd-p99-µs")
				b.ReportMetric(us(pp50), "bare-p50-µs")
				b.ReportMetric(us(pp99), "bare-p99-µs")
				b.ReportMetric(float64(cp50)/float64(pp50), "p50-ratio")
				b.ReportMetric(float64(cp99)/float64(pp99), "p99-ratio")
				// Beside it, the responders in the benchmark's own process.
				b.ReportMetric(us(bp50), "inproc-p50-µs")
				b.ReportMetric(us(bp99), "inproc-p99-µs")
				b.ReportMetric(float64(cp50)/float64(bp50), "inproc-p50-ratio")
				b.ReportMetric(float64(cp99)/float64(bp99), "inproc-p99-ratio")
				for _, s := range followStatsOf(b, tc.nc) {
					b.Logf("%s: role=%s replies=%d follower_replies=%d stream_probes=%d", s.Instance, s.Role, s.Requests, s.FollowerReplies, s.StreamProbes)
				}
			}
			b.Run("fetch", func(b *testing.B) { run(b, false) })
			b.Run("turn", func(b *testing.B) { run(b, true) })
		})
	}
}

// replySeq reads the seq of a JSON context reply from its head, where
// the reply has it ({"session":...,"seq":N,...}): a benchmark checks it
// without decoding the whole reply.
func replySeq(data []byte) uint64 {
	m := seqField.FindSubmatch(data[:min(len(data), 256)])
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseUint(string(m[1]), 10, 64)
	return n
}

var seqField = regexp.MustCompile(`"seq":(\d+)`)
