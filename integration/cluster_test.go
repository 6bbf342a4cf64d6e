package integration

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sort"
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
	clusterLoadFor = flag.Duration("cluster.load", 3*time.Second, "load before and after each fault in the TestCluster tests (make cluster-long: 10s)")
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
	t    *testing.T
	c    *natstest.Cluster
	urls string
	nc   *nats.Conn

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
	unreadable time.Duration // for the attempt that succeeded
}

func startTestCluster(t *testing.T, instances int) *testCluster {
	c := natstest.StartCluster(t, 3)
	tc := &testCluster{t: t, c: c, urls: c.URLs(),
		outcomes: make(chan outcome, 1<<18), reads: make(chan read, 1<<18), samples: make(chan sample, 1<<20)}
	tc.nc = c.Connect(t)
	for range instances {
		tc.startInstance()
	}
	return tc
}

func (tc *testCluster) startInstance() *instance {
	p := startProcess(tc.t, "--nats", tc.urls, "--replicas", "3", "--cache-sessions", "8")
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

func (tc *testCluster) forget(in *instance) {
	tc.mu.Lock()
	tc.insts = slices.DeleteFunc(tc.insts, func(x *instance) bool { return x == in })
	tc.mu.Unlock()
}

func (tc *testCluster) instances() []*instance {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return slices.Clone(tc.insts)
}

// instanceStats is the part of an instance's $SRV.STATS the tests read.
type instanceStats struct {
	Instance string `json:"instance"`
	Role     string `json:"role"`
	Applied  uint64 `json:"applied"`
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
	for w := range writers {
		tc.wg.Add(1)
		go tc.writer(w, sessions)
	}
}

func (tc *testCluster) writer(w, sessions int) {
	defer tc.wg.Done()
	t := tc.t
	nc, err := nats.Connect(tc.urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
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
		session := fmt.Sprintf("c%d", rng.IntN(sessions))
		recs := gen.Next()
		if rng.IntN(10) == 0 {
			recs = []any{gen.Compaction([]any{gen.User(), gen.Answer()})}
		}
		var lastAck uint64
		for _, v := range recs {
			rid := fmt.Sprintf("w%d-%d", w, n)
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
			r = read{session: fmt.Sprintf("c%d", rng.IntN(sessions))}
		}
		first := time.Now()
		for !tc.stop.Load() || time.Since(first) < 20*time.Second {
			sent := time.Now()
			// A request in flight to an instance that dies gets no answer:
			// the client gives up after a second and asks again.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			data, err := ctxdclient.Context(ctx, nc, r.session, ctxdclient.Request{MinSeq: r.minSeq, WaitMS: 900})
			cancel()
			s := sample{at: sent.Sub(tc.start), took: time.Since(sent), failed: err != nil}
			if err == nil {
				s.unreadable = time.Since(first)
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

	var lost, duplicated, unexpected, storedUnacked int
	truth := map[string][]projection.Record{}
	lastSeq := map[string]uint64{}
	for session, outs := range bySession {
		type stored struct {
			seq  uint64
			data []byte
		}
		byRid := map[string][]stored{}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := bus.ReadSubject(ctx, tc.nc, "TRANSCRIPTS", "transcripts."+session, 1, ^uint64(0), func(seq uint64, data []byte) error {
			v, err := record.Decode(data)
			require.NoError(t, err)
			rid, _ := v.String("rid")
			byRid[rid] = append(byRid[rid], stored{seq, bytes.Clone(data)})
			lastSeq[session] = seq
			return nil
		})
		cancel()
		require.NoError(t, err)
		known := map[string]bool{}
		var recs []projection.Record
		for _, o := range outs {
			known[o.rid] = true
			got := byRid[o.rid]
			switch {
			case o.state == "acked" && (len(got) == 0 || got[0].seq != o.seq || !bytes.Equal(got[0].data, o.data)):
				lost++
			case len(got) > 1:
				duplicated++
			}
			switch {
			case o.state == "acked":
				recs = append(recs, projection.Record{Seq: o.seq, Value: mustDecode(t, string(o.data))})
			case len(got) > 0:
				storedUnacked++
				recs = append(recs, projection.Record{Seq: got[0].seq, Value: mustDecode(t, string(got[0].data))})
			}
		}
		for rid := range byRid {
			if !known[rid] {
				unexpected++
			}
		}
		slices.SortFunc(recs, func(a, b projection.Record) int { return cmp.Compare(a.Seq, b.Seq) })
		truth[session] = recs
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
	out, err := exec.Command(ctxdBinary(t), "rebuild", "--check", "--nats", tc.urls).CombinedOutput()
	require.NoError(t, err, "rebuild --check: %s", out)
	require.Contains(t, string(out), "no differences")

	var samples []sample
	for s := range tc.samples {
		samples = append(samples, s)
	}
	t.Logf("load: sessions=%d publishes acked=%d unknown=%d failed=%d, stored without an acknowledgement=%d",
		len(bySession), counts["acked"], counts["unknown"], counts["failed"], storedUnacked)
	t.Logf("ctxd: replies checked=%d (during the load %d, after it %d) wrong=%d; requests=%d",
		len(during)+len(after), len(during), len(after), wrong, len(samples))
	require.NotZero(t, len(during), "reads during the load")
	require.Zero(t, wrong, "replies that differ from Build over the session's records up to their seq")
	require.Zero(t, lost, "acknowledged records not in the stream at their sequence")
	require.Zero(t, duplicated, "records stored more than once despite their message id")
	require.Zero(t, unexpected, "records in the stream that nobody published")
	return samples
}

// faultFigures says what the load saw from a fault at `at` on: the longest
// a read waited for its session, the share of requests that failed, and
// the p99 and worst of the requests in the 10 s after.
func faultFigures(samples []sample, at time.Duration) string {
	var took []time.Duration
	var failed, n int
	var unreadable time.Duration
	for _, s := range samples {
		if s.at < at || s.at > at+10*time.Second {
			continue
		}
		n++
		if s.failed {
			failed++
			continue
		}
		took = append(took, s.took)
		unreadable = max(unreadable, s.unreadable)
	}
	if len(took) == 0 {
		return "no request answered"
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	p99 := took[min(len(took)-1, len(took)*99/100)]
	return fmt.Sprintf("requests=%d failed=%d (%.2f%%) longest unreadable=%v p99=%v worst=%v",
		n, failed, 100*float64(failed)/float64(max(n, 1)), unreadable.Round(time.Millisecond), p99.Round(time.Microsecond), took[len(took)-1].Round(time.Microsecond))
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
	v := record.NewMap("role", "user", "content", "after the owner stopped")
	last = c.publishValue("s6", v, false)
	recs = append(recs, projection.Record{Seq: last, Value: v})
	r := c.fetchSeq("s6", last, false)
	require.Equal(t, last, r.Seq)
	requireMessages(t, projection.Build(recs, projection.Options{}).Messages, r.Messages)
	tc.owner()
}

// clusterFault runs the load on n instances, applies the fault, keeps
// the load on, and checks everything.
func clusterFault(t *testing.T, n int, fault func(tc *testCluster)) {
	tc := startTestCluster(t, n)
	tc.load(*clusterWriters, 16)
	done := make(chan struct{})
	stall := tc.watchIngest(done)
	time.Sleep(*clusterLoadFor)
	at := time.Since(tc.start)
	fault(tc)
	time.Sleep(*clusterLoadFor)
	close(done)
	samples := tc.finish()
	t.Logf("after the fault: %s; ingest stalled at most %v", faultFigures(samples, at), stall().Round(time.Millisecond))
	for _, in := range tc.instances() {
		tc.term(in)
	}
}

func TestCluster_KillOwner(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d instances", n), func(t *testing.T) {
			clusterFault(t, n, func(tc *testCluster) { tc.kill(tc.owner()) })
		})
	}
}

func TestCluster_KillReader(t *testing.T) {
	clusterFault(t, 3, func(tc *testCluster) {
		owner := tc.owner()
		for _, in := range tc.instances() {
			if in != owner {
				tc.kill(in)
				return
			}
		}
	})
}

func TestCluster_RollingRestart(t *testing.T) {
	clusterFault(t, 3, func(tc *testCluster) {
		for _, in := range tc.instances() {
			tc.term(in)
			tc.startInstance()
		}
	})
}

func TestCluster_StopNode(t *testing.T) {
	clusterFault(t, 2, func(tc *testCluster) {
		leader := tc.c.WaitStreamLeader(t, "TRANSCRIPTS")
		leader.Stop()
		time.Sleep(*clusterLoadFor / 2)
		leader.Start(t)
	})
}
