//go:build slow

package integration

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// owners maps each partition to the instances (by pid) that say they
// apply it.
func (tc *testCluster) owners() map[int][]int {
	out := map[int][]int{}
	for _, s := range tc.stats() {
		i := strings.LastIndex(s.Instance, ":")
		pid, _ := strconv.Atoi(s.Instance[i+1:])
		for _, k := range s.Partitions {
			out[k] = append(out[k], pid)
		}
	}
	return out
}

// settle waits until every partition is applied by exactly one instance,
// none with more than ceil(P / instances), and returns the owners and
// how long that took.
func (tc *testCluster) settle() (map[int]int, time.Duration) {
	start := time.Now()
	var last map[int][]int
	var owner map[int]int
	require.Eventually(tc.t, func() bool {
		last = tc.owners()
		n := len(tc.instances())
		target := (tc.partitions + n - 1) / n
		owner = map[int]int{}
		per := map[int]int{}
		for k := range tc.partitions {
			if len(last[k]) != 1 {
				return false
			}
			owner[k] = last[k][0]
			per[last[k][0]]++
		}
		for _, c := range per {
			if c > target {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every partition applied by one instance")
	return owner, time.Since(start)
}

// moved counts the partitions whose owner changed.
func moved(before, after map[int]int) int {
	n := 0
	for k, o := range after {
		if before[k] != o {
			n++
		}
	}
	return n
}

// Three instances on a 3-node cluster, a stream of 16 partitions, under
// publishes and read-your-writes reads: after settling every partition is
// applied by exactly one instance, at most ceil(16/N) each; an instance
// joins, one stops, one is killed (SIGKILL), one stalls past the pinned
// TTL so that another takes its partitions while it still thinks it holds
// them (two instances applying a partition at once) and comes back. Every
// reply equals Build over its session's records up to its seq, at or past
// its min_seq; no record is lost, duplicated or reordered; rebuild
// --check finds nothing. The partitions moved per event are printed.
func TestPartitions_Balance(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of load on a cluster; -short (the race detector's run) leaves it to the plain run")
	}
	c := natstest.StartCluster(t, 3)
	pins := watchPins(t, c)
	tc := onClusterP(t, c, "p", 1, 16)
	// The first instance makes the stream and its consumers; then the others.
	tc.startInstance()
	tc.startInstance()
	tc.load(*clusterWriters, 64)
	owners, took := tc.settle()
	t.Logf("3 instances: settled in %v; partitions per instance %v", took.Round(time.Millisecond), perInstance(owners))
	// Every partition's endpoint answers, served by its owner.
	for k := range tc.partitions {
		session := ""
		for i := 0; session == ""; i++ {
			if s := fmt.Sprintf("p%d", i); subject.Partition(s, tc.partitions) == k {
				session = s
			}
		}
		msg, err := tc.nc.Request(fmt.Sprintf("ctxd.p.%d.%s", k, session), nil, 10*time.Second)
		require.NoError(t, err, "partition %d", k)
		require.Empty(t, msg.Header.Get("Nats-Service-Error-Code"), "partition %d: %s", k, msg.Header.Get("Nats-Service-Error"))
	}
	parts, err := ctxdclient.Partitions(t.Context(), tc.nc)
	require.NoError(t, err)
	require.Equal(t, tc.partitions, parts, "$SRV.INFO says the partitions")

	type happened struct {
		name string
		at   time.Time
	}
	var events []happened
	event := func(name string, do func() time.Time) {
		at := do()
		after, _ := tc.settle()
		t.Logf("%s: %d partitions moved, settled %v after; per instance %v", name, moved(owners, after), time.Since(at).Round(time.Millisecond), perInstance(after))
		owners = after
		events = append(events, happened{name, at})
	}
	event("an instance joins (4)", func() time.Time { tc.startInstance(); return time.Now() })
	event("an instance stops (SIGTERM, 3)", func() time.Time {
		in := tc.instances()[0]
		at := time.Now()
		tc.term(in)
		return at
	})
	event("an instance is killed (SIGKILL, 2)", func() time.Time {
		in := tc.instances()[0]
		at := time.Now()
		tc.kill(in)
		return at
	})
	event("an instance joins (3)", func() time.Time { tc.startInstance(); return time.Now() })
	event("an instance stalls past the pinned TTL and comes back", func() time.Time {
		in := tc.instances()[0]
		at := time.Now()
		require.NoError(t, in.p.cmd.Process.Signal(syscall.SIGSTOP))
		time.Sleep(5 * time.Second) // past the 3 s pinned TTL: the others take its partitions
		require.NoError(t, in.p.cmd.Process.Signal(syscall.SIGCONT))
		return at
	})
	time.Sleep(*clusterLoadFor)
	samples := tc.finish()
	for i, e := range events {
		end := time.Now()
		if i+1 < len(events) {
			end = events[i+1].at
		}
		t.Logf("%s: %s; %s", e.name, pins.between(e.at, end), windowFigures(samples, e.at.Sub(tc.start), end.Sub(tc.start)))
	}
	for _, in := range tc.instances() {
		tc.term(in)
	}
}

// perInstance counts the partitions of each owner, sorted.
func perInstance(owner map[int]int) string {
	per := map[int]int{}
	for _, o := range owner {
		per[o]++
	}
	var counts []int
	for _, c := range per {
		counts = append(counts, c)
	}
	slices.Sort(counts)
	return fmt.Sprint(counts)
}

// pinWatch records the pinned consumer advisories of the partitions'
// consumers: when each partition was unpinned (by an admin: handed
// back) and pinned again.
type pinWatch struct {
	mu     sync.Mutex
	events []pinEvent
}

type pinEvent struct {
	at       time.Time
	consumer string
	pinned   bool // false: unpinned
}

func watchPins(t testing.TB, c *natstest.Cluster) *pinWatch {
	w := &pinWatch{}
	nc := c.Connect(t)
	for _, kind := range []string{"PINNED", "UNPINNED"} {
		pinned := kind == "PINNED"
		_, err := nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER."+kind+".TRANSCRIPTS.*", func(m *nats.Msg) {
			at := time.Now()
			w.mu.Lock()
			w.events = append(w.events, pinEvent{at, m.Subject[strings.LastIndex(m.Subject, ".")+1:], pinned})
			w.mu.Unlock()
		})
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	return w
}

// between says, for the pins changed from at to end: how many
// partitions were pinned again, the longest from at to a new pin, and
// the longest from an unpin (a handback) to the next pin of the same
// partition.
func (w *pinWatch) between(at, end time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	unpinned := map[string]time.Time{}
	var toPin, handoff time.Duration
	first := time.Duration(-1)
	var handoffs []time.Duration
	n := 0
	for _, e := range w.events {
		if e.at.Before(at) || e.at.After(end) {
			continue
		}
		if !e.pinned {
			unpinned[e.consumer] = e.at
			continue
		}
		n++
		toPin = max(toPin, e.at.Sub(at))
		if first < 0 {
			first = e.at.Sub(at)
		}
		if u, ok := unpinned[e.consumer]; ok {
			d := e.at.Sub(u)
			handoffs = append(handoffs, d)
			handoff = max(handoff, d)
			delete(unpinned, e.consumer)
		}
	}
	slices.Sort(handoffs)
	med := time.Duration(0)
	if len(handoffs) > 0 {
		med = handoffs[len(handoffs)/2]
	}
	return fmt.Sprintf("pins taken=%d, the first %v and the last %v after the event; unpin->pin=%d, median %v worst %v",
		n, first.Round(time.Millisecond), toPin.Round(time.Millisecond), len(handoffs), med.Round(time.Microsecond), handoff.Round(time.Microsecond))
}

// cpuTime returns the CPU time a process used so far (user and system),
// from /proc.
func cpuTime(t testing.TB, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The fields after the command's closing parenthesis: utime and stime
	// are the 14th and 15th of the whole line, in clock ticks (100 Hz).
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	u, err := strconv.ParseUint(f[11], 10, 64)
	require.NoError(t, err)
	st, err := strconv.ParseUint(f[12], 10, 64)
	require.NoError(t, err)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// procCounts returns a process's read system calls (syscr in
// /proc/<pid>/io) and its threads' context switches (voluntary and not,
// from /proc/<pid>/task/*/status): how often it woke up to read.
func procCounts(t testing.TB, pid int) (reads, switches uint64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "syscr: "); ok {
			reads, err = strconv.ParseUint(v, 10, 64)
			require.NoError(t, err)
		}
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	require.NoError(t, err)
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		for _, line := range strings.Split(string(data), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				require.NoError(t, err)
				switches += n
			}
		}
	}
	return reads, switches
}

// BenchmarkPartitions_CPU measures the CPU time ctxd spends per record
// applied, per instance, with 1, 2 and 4 instances on a 16-partition
// stream (3-node cluster, R3): the instances split the partitions, so
// each should apply 1/N of the records at the same cost per record, and
// the total cost per record should not rise with N. Run with
// -benchtime 1x; -partitions.records sets the records published, and
// -partitions.rate paces them (so that every instance keeps up, whatever
// N: the cost per record of a process depends on how busy it is), and
// -partitions.per-instance makes both per instance, so that N instances
// get N times the records at N times the rate: each instance as busy
// whatever N, as N instances on N machines with N times the load.
func BenchmarkPartitions_CPU(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads /proc")
	}
	c := natstest.StartCluster(b, 3)
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("%d instances", n), func(b *testing.B) {
			for range b.N {
				partitionsCPU(b, c, n)
			}
		})
	}
}

var (
	partitionRecords  = flag.Int("partitions.records", 40000, "records BenchmarkPartitions_CPU publishes per run")
	partitionRate     = flag.Int("partitions.rate", 0, "records a second BenchmarkPartitions_CPU publishes at (0: as fast as the cluster takes them)")
	partitionPerInst  = flag.Bool("partitions.per-instance", false, "BenchmarkPartitions_CPU: -partitions.records and -partitions.rate are per instance (N instances get N times as many, N times as fast), so each instance has the same load whatever N")
	partitionProfiles = flag.String("partitions.cpuprofile", "", "`DIR` where BenchmarkPartitions_CPU's instances write CPU profiles (cpu-n<N>-<i>.pprof, from start to shutdown)")
)

func partitionsCPU(b *testing.B, c *natstest.Cluster, n int) {
	tc := onClusterP(b, c, fmt.Sprintf("cpu%d-", n), 0, 16)
	for i := range n {
		if *partitionProfiles != "" {
			// ctxd serve reads --cpuprofile from CTXD_CPUPROFILE.
			b.Setenv("CTXD_CPUPROFILE", filepath.Join(*partitionProfiles, fmt.Sprintf("cpu-n%d-%d.pprof", n, i)))
		}
		tc.startInstance()
	}
	js, err := jetstream.New(tc.nc)
	require.NoError(b, err)
	data := bytes.Repeat([]byte("x"), 400)
	rec := []byte(`{"role":"user","content":"` + string(data) + `"}`)
	publish := func(count, sessions, rate int) {
		// At rate, records go out every 10 ms, rate/100 at a time.
		var tick *time.Ticker
		if rate > 0 {
			tick = time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
		}
		for i := range count {
			if tick != nil && i%max(1, rate/100) == 0 {
				<-tick.C
			}
			if _, err := js.PublishAsync(fmt.Sprintf("transcripts.%ss%d", tc.prefix, i%sessions), rec); err != nil {
				b.Fatal(err)
			}
			if i%2000 == 1999 {
				<-js.PublishAsyncComplete()
			}
		}
		<-js.PublishAsyncComplete()
	}
	records := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, s := range tc.stats() {
			out[s.Instance] = s.Records
		}
		return out
	}
	// Every partition pinned and balanced before the measure: a pin is
	// taken only when a record is delivered, so records keep coming until
	// then.
	warm := make(chan struct{})
	warmed := make(chan struct{})
	go func() {
		defer close(warmed)
		for {
			select {
			case <-warm:
				return
			case <-time.After(50 * time.Millisecond):
			}
			publish(100, 500, 0)
		}
	}()
	tc.settle()
	close(warm)
	<-warmed
	time.Sleep(time.Second) // the warm records applied
	// What an instance spends with nothing to apply (pulls, heartbeats,
	// the balancer's pings), per second, measured over 3 s.
	idle := map[int]time.Duration{}
	type counts struct{ reads, switches uint64 }
	idleCounts := map[int]counts{}
	for _, in := range tc.instances() {
		idle[in.pid] = cpuTime(b, in.pid)
		r, sw := procCounts(b, in.pid)
		idleCounts[in.pid] = counts{r, sw}
	}
	idleFor := 3 * time.Second
	time.Sleep(idleFor)
	before := records()
	cpu0 := map[int]time.Duration{}
	counts0 := map[int]counts{}
	for _, in := range tc.instances() {
		cpu0[in.pid] = cpuTime(b, in.pid)
		r, sw := procCounts(b, in.pid)
		counts0[in.pid] = counts{r, sw}
		idle[in.pid] = cpu0[in.pid] - idle[in.pid]
		idleCounts[in.pid] = counts{r - idleCounts[in.pid].reads, sw - idleCounts[in.pid].switches}
		b.Logf("N=%d instance %d idle: CPU %.1f ms/s, %.0f reads/s, %.0f context switches/s", n, in.pid,
			float64(idle[in.pid].Microseconds())/1000/idleFor.Seconds(), float64(idleCounts[in.pid].reads)/idleFor.Seconds(), float64(idleCounts[in.pid].switches)/idleFor.Seconds())
	}
	// JetStream API requests (the account's, all clients): the
	// instances' own are their stream and consumer requests.
	apiTotal := func() uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		info, err := js.AccountInfo(ctx)
		require.NoError(b, err)
		return info.API.Total
	}
	api0 := apiTotal()
	start := time.Now()
	R, rate := *partitionRecords, *partitionRate
	if *partitionPerInst {
		R, rate = R*n, rate*n
	}
	b.Logf("N=%d: publishing %d records at %s", n, R, map[bool]string{true: strconv.Itoa(rate) + "/s", false: "the cluster's pace"}[rate > 0])
	publish(R, 500, rate)
	var after map[string]uint64
	require.Eventually(b, func() bool {
		after = records()
		var sum uint64
		for id, r := range after {
			sum += r - before[id]
		}
		return sum >= uint64(R)
	}, 5*time.Minute, 100*time.Millisecond, "every record applied")
	took := time.Since(start)
	api1 := apiTotal()
	var total, totalIdle time.Duration
	var applied, reads, switches uint64
	for _, in := range tc.instances() {
		cpu := cpuTime(b, in.pid) - cpu0[in.pid]
		r, sw := procCounts(b, in.pid)
		r, sw = r-counts0[in.pid].reads, sw-counts0[in.pid].switches
		reads, switches = reads+r, switches+sw
		totalIdle += time.Duration(float64(idle[in.pid]) * took.Seconds() / idleFor.Seconds())
		var mine uint64
		for id, r := range after {
			if strings.HasSuffix(id, ":"+strconv.Itoa(in.pid)) {
				mine = r - before[id]
			}
		}
		total += cpu
		applied += mine
		b.Logf("N=%d instance %d: applied %d records (%.0f%%), CPU %v, %.1f µs/record; %d reads (%.1f records each), %d context switches (%.1f records each); peak RSS %.0f MiB",
			n, in.pid, mine, 100*float64(mine)/float64(R), cpu, float64(cpu.Microseconds())/float64(max(mine, 1)), r, float64(mine)/float64(max(r, 1)), sw, float64(mine)/float64(max(sw, 1)), float64(procStatus(b, in.pid, "VmHWM"))/(1<<20))
	}
	b.Logf("N=%d: %d reads (%.1f records each), %d context switches (%.1f records each) over all instances; %d JetStream API requests",
		n, reads, float64(applied)/float64(max(reads, 1)), switches, float64(applied)/float64(max(switches, 1)), api1-api0)
	b.Logf("N=%d: %d records in %v; CPU total %v, %.1f µs/record over all instances; idle CPU over as long %v, %.1f µs/record without it",
		n, applied, took.Round(time.Millisecond), total, float64(total.Microseconds())/float64(max(applied, 1)), totalIdle.Round(time.Millisecond), float64((total-totalIdle).Microseconds())/float64(max(applied, 1)))
	b.ReportMetric(float64(total.Microseconds())/float64(max(applied, 1)), "cpu-µs/record")
	b.ReportMetric(float64(applied)/took.Seconds(), "records/s")
	b.ReportMetric(float64(applied)/float64(max(reads, 1)), "records/read")
	for _, in := range tc.instances() {
		tc.term(in)
	}
}

// windowFigures says what the load saw from at to end (since the load
// started).
func windowFigures(samples []sample, at, end time.Duration) figures {
	f := figures{why: map[string]int{}}
	var took []time.Duration
	for _, s := range samples {
		if s.at < at || s.at > end {
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

// BenchmarkPartitions_Handoff measures, on a 16-partition stream with 3
// instances and a steady publisher (every partition gets a record every
// few milliseconds, so a pin is taken as soon as it is free): the
// handoff of a graceful stop (SIGTERM: unpin to the next pin, per
// partition) and the failover after a SIGKILL (from the kill to the
// partitions' new pins, after the 3 s pinned TTL). Run with -benchtime 1x.
func BenchmarkPartitions_Handoff(b *testing.B) {
	c := natstest.StartCluster(b, 3)
	pins := watchPins(b, c)
	tc := onClusterP(b, c, "h", 0, 16)
	for range 3 {
		tc.startInstance()
	}
	js, err := jetstream.New(tc.nc)
	require.NoError(b, err)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec := []byte(`{"role":"user","content":"` + strings.Repeat("x", 400) + `"}`)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for range 40 { // 4 000 records/s over 1 000 sessions
				js.PublishAsync(fmt.Sprintf("transcripts.hs%d", i%1000), rec)
				i++
			}
		}
	}()
	defer func() { close(stop); <-done }()
	owners, _ := tc.settle()
	for round := range b.N {
		leaver := tc.instances()[0]
		var gone []string
		for k, o := range owners {
			if o == leaver.pid {
				gone = append(gone, streams.PartitionName(k))
			}
		}
		at := time.Now()
		tc.term(leaver)
		tc.settle()
		lastUnpin, lastPin, missing := pins.handoff(at, gone)
		b.Logf("round %d, SIGTERM (3 -> 2): the %d partitions handed back: the last unpinned %v and the last pinned again %v after the signal; not pinned again %d",
			round, len(gone), lastUnpin.Round(100*time.Microsecond), lastPin.Round(100*time.Microsecond), missing)
		b.ReportMetric(float64(lastPin)/float64(time.Millisecond), "sigterm-last-pin-ms")
		b.Logf("round %d, SIGTERM (3 -> 2): %s; settled %v after", round, pins.between(at, time.Now()), time.Since(at).Round(time.Millisecond))
		if *handoffEvents {
			b.Logf("signal at %s; pin events:%s", at.Format("15:04:05.000"), pins.dump(at, time.Now()))
			for _, line := range strings.Split(stderrOf(leaver.p), "\n") {
				if strings.Contains(line, "shutting down") || strings.Contains(line, "handed back") || strings.Contains(line, "checkpoints") || strings.Contains(line, "unpin") {
					b.Logf("stopping instance: %s", line)
				}
			}
		}
		tc.startInstance()
		tc.settle()
		at = time.Now()
		tc.kill(tc.instances()[0])
		tc.settle()
		b.Logf("round %d, SIGKILL (3 -> 2): %s; settled %v after", round, pins.between(at, time.Now()), time.Since(at).Round(time.Millisecond))
		tc.startInstance()
		owners, _ = tc.settle()
	}
}

var handoffEvents = flag.Bool("handoff.events", false, "BenchmarkPartitions_Handoff lists the pin events after the SIGTERM")

// An unpartitioned stream in use is partitioned under load: two
// instances serve it, publishers keep publishing; the instances stop,
// ctxd partition --partitions 16 adds the transform, the instances start
// again and find 16 partitions. Every record stays at its sequence (the
// sessions' older records on transcripts.<session>, newer ones on
// transcripts.<k>.<session>); every reply, before and after, equals
// Build over the session's records up to its seq, at or past its
// min_seq; rebuild --check finds nothing.
func TestPartitions_MigrateUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster under load; -short leaves it to the plain run")
	}
	c := natstest.StartCluster(t, 3)
	tc := onClusterP(t, c, "m", 2, 0)
	tc.load(*clusterWriters, 32)
	time.Sleep(*clusterLoadFor)
	for _, in := range tc.instances() {
		tc.term(in)
	}
	out, err := exec.Command(ctxdBinary(t), "partition", "--partitions", "16", "--nats", tc.urls).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("ctxd partition: %s", bytes.TrimSpace(out))
	tc.partitions = 16
	tc.startInstance()
	tc.startInstance()
	time.Sleep(2 * *clusterLoadFor)
	tc.finish()
	js, err := jetstream.New(tc.nc)
	require.NoError(t, err)
	st, err := js.Stream(t.Context(), "TRANSCRIPTS")
	require.NoError(t, err)
	l, err := bus.LayoutOf(st.CachedInfo().Config)
	require.NoError(t, err)
	require.Equal(t, 16, l.P)
	require.NotZero(t, l.After)
	subs, err := bus.Subjects(t.Context(), js, "TRANSCRIPTS", "transcripts.>")
	require.NoError(t, err)
	old, partitioned := 0, 0
	for _, s := range subs {
		if strings.Count(s.Subject, ".") == 1 {
			old++
		} else {
			partitioned++
		}
	}
	t.Logf("subjects: %d unpartitioned (records up to %d), %d partitioned", old, l.After, partitioned)
	require.NotZero(t, old)
	require.NotZero(t, partitioned)
	for _, in := range tc.instances() {
		tc.term(in)
	}
}

// The nats-server node that leads partitions' consumers (and, when it
// can be chosen so, not the stream) is SIGKILLed under publishes and
// read-your-writes reads through 3 ctxd instances on a 16-partition
// stream (3 nats-server processes, R3), and started again once the
// instances have settled without it (-node.down at least). JetStream moves those consumers' leaders and clears their
// pins; the instances' pulls take them again, and the balancer evens
// the counts out. While the node is down and after it is back, every
// partition is applied by exactly one instance after settling; every
// reply equals Build over its session's records up to its seq, at or
// past its min_seq; no record is lost, duplicated or reordered; rebuild
// --check finds nothing. The partitions moved are printed.
func TestPartitions_KillConsumerLeaderNode(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of nats-server processes under load; -short leaves it to the plain run")
	}
	c := natstest.StartProcessClusterWith(t, 3, natstest.ProcessOptions{RoutePingInterval: *nodeRoutePing})
	tc := onClusterP(t, c, "kl", 0, 16)
	nc, err := nats.Connect(c.URLs(), append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, nodeClientOpts...)...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	tc.nc = nc
	tc.clientOpts = nodeClientOpts
	for range 3 {
		tc.startInstance()
	}
	tc.load(*clusterWriters, 64)
	tc.readers(2, 64)
	owners, took := tc.settle()
	t.Logf("3 instances: settled in %v; partitions per instance %v", took.Round(time.Millisecond), perInstance(owners))
	time.Sleep(*clusterLoadFor)

	// The consumers' leaders, by node.
	js, err := jetstream.New(tc.nc)
	require.NoError(t, err)
	leaders := func() map[string][]int {
		leads := map[string][]int{}
		for k := range tc.partitions {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			cons, err := js.Consumer(ctx, "TRANSCRIPTS", streams.PartitionName(k))
			cancel()
			if err != nil || cons.CachedInfo().Cluster == nil {
				leads[""] = append(leads[""], k)
				continue
			}
			l := cons.CachedInfo().Cluster.Leader
			leads[l] = append(leads[l], k)
		}
		return leads
	}
	leads := leaders()
	require.Empty(t, leads[""], "every consumer has a leader")
	streamLeader := tc.c.WaitStreamLeader(t, "TRANSCRIPTS").Name
	var node *natstest.Node
	for _, n := range tc.c.Nodes {
		if len(leads[n.Name]) > 0 && (node == nil || node.Name == streamLeader) {
			node = n
		}
	}
	require.NotNil(t, node)
	t.Logf("%s: SIGKILL %s, the leader of partitions %v's consumers (the stream's leader: %s)", time.Now().Format("15:04:05.000"), node.Name, leads[node.Name], streamLeader)
	at := time.Since(tc.start)
	killed := time.Now()
	node.Kill()
	require.Eventually(t, func() bool {
		l := leaders()
		return len(l[node.Name]) == 0 && len(l[""]) == 0
	}, time.Minute, 100*time.Millisecond, "the consumers the node led have other leaders")
	t.Logf("%s: the consumers have new leaders", time.Now().Format("15:04:05.000"))
	down, took := tc.settle()
	t.Logf("node down: %d partitions moved, settled %v after; per instance %v", moved(owners, down), took.Round(time.Millisecond), perInstance(down))
	time.Sleep(*nodeDown - time.Since(killed)) // down -node.down at least
	node.Start(t)
	waitStreamHealthy(tc)
	back, took := tc.settle()
	t.Logf("node back: %d partitions moved, settled %v after; per instance %v", moved(down, back), took.Round(time.Millisecond), perInstance(back))
	time.Sleep(*clusterLoadFor)
	samples := tc.finish()
	t.Logf("after the kill: %s", faultFigures(samples, at))
	for _, in := range tc.instances() {
		tc.term(in)
	}
}
