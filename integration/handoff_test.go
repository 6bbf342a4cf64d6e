//go:build slow

package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/ownership"
	"github.com/ctxd/ctxd/streams"
)

// publishSteadily publishes records to sessions prefix0..prefix999, 2 000
// a second, until the test ends: every partition gets a record every few
// milliseconds, so a partition nobody holds is pinned as soon as someone
// pulls from it.
func publishSteadily(t testing.TB, nc *nats.Conn, prefix string) {
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec := []byte(`{"role":"user","content":"` + strings.Repeat("x", 200) + `"}`)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for range 20 {
				js.PublishAsync(fmt.Sprintf("transcripts.%s%d", prefix, i%1000), rec)
				i++
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// pingReplies asks $SRV.PING.ctxd and returns each instance's reply as
// sent, by the pid in its instance name.
func pingReplies(t testing.TB, nc *nats.Conn) map[int][]byte {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.PublishRequest("$SRV.PING.ctxd", inbox, nil))
	out := map[int][]byte{}
	wait := 5 * time.Second // for the first
	for {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return out
		}
		wait = 500 * time.Millisecond // for more
		var ping struct {
			Metadata map[string]string `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &ping))
		inst := ping.Metadata["instance"]
		pid, err := strconv.Atoi(inst[strings.LastIndex(inst, ":")+1:])
		require.NoError(t, err, inst)
		out[pid] = m.Data
	}
}

// unpinnedSince returns the consumers unpinned at or after at.
func (w *pinWatch) unpinnedSince(at time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, e := range w.events {
		if !e.pinned && !e.at.Before(at) && !slices.Contains(out, e.consumer) {
			out = append(out, e.consumer)
		}
	}
	slices.Sort(out)
	return out
}

// pinnedSince returns the consumers pinned at or after at. (A consumer's
// UNPINNED advisory may reach a watcher after the PINNED one that
// followed it: they come from different places in the server.)
func (w *pinWatch) pinnedSince(at time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, e := range w.events {
		if e.pinned && !e.at.Before(at) && !slices.Contains(out, e.consumer) {
			out = append(out, e.consumer)
		}
	}
	slices.Sort(out)
	return out
}

// An instance that stops (SIGTERM) tells the others which partitions it
// hands back, and they take them at once, without waiting for a balancer
// round to count the instances without it. A stopping instance answers
// $SRV.PING until its service stops, after the handoff; here that answer
// is kept up for the whole check, in its own words (its $SRV.PING reply,
// sent again to every ping), so that no round can count two instances
// and no partition can reach a survivor through a round alone. With
// 12 partitions and 3 instances each holds exactly its 4 and pulls from
// no other; without the notice the stopping one's 4 were never pulled
// from again (each survivor at its target of 4). With it, every partition
// the stopping instance unpinned is pinned again by a survivor.
//
// Hostile notices before it (not JSON, another stream, partitions the
// stream does not have, a list longer than the stream's, no instance)
// change nothing: every partition keeps its owner.
func TestPartitions_GracefulHandoff(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster and three ctxd processes; -short leaves it to the plain run")
	}
	c := natstest.StartCluster(t, 3)
	pins := watchPins(t, c)
	tc := onClusterP(t, c, "g", 0, 12)
	tc.startInstance() // makes the stream and the consumers
	tc.startInstance()
	tc.startInstance()
	publishSteadily(t, tc.nc, "g")
	owners, _ := tc.settle()
	t.Logf("3 instances: partitions per instance %v", perInstance(owners))

	// Hostile notices.
	var replies map[int][]byte
	require.Eventually(t, func() bool {
		replies = pingReplies(t, tc.nc)
		return len(replies) == 3
	}, 30*time.Second, 10*time.Millisecond, "the 3 instances answer $SRV.PING")
	notice := func(h ownership.Handback) []byte {
		data, err := json.Marshal(h)
		require.NoError(t, err)
		return data
	}
	many := make([]int, 100000)
	for _, data := range [][]byte{
		[]byte("not json"),
		[]byte(`{"stream":"TRANSCRIPTS","partitions":12,"instance":"x:1","handed_back":"all"}`),
		notice(ownership.Handback{Stream: "OTHER", Partitions: 12, Instance: "x:1", HandedBack: []int{0}}),
		notice(ownership.Handback{Stream: "TRANSCRIPTS", Partitions: 16, Instance: "x:1", HandedBack: []int{0}}),
		notice(ownership.Handback{Stream: "TRANSCRIPTS", Partitions: 12, Instance: "x:1", HandedBack: []int{12}}),
		notice(ownership.Handback{Stream: "TRANSCRIPTS", Partitions: 12, Instance: "x:1", HandedBack: []int{-1}}),
		notice(ownership.Handback{Stream: "TRANSCRIPTS", Partitions: 12, Instance: "x:1", HandedBack: many}),
		notice(ownership.Handback{Stream: "TRANSCRIPTS", Partitions: 12, Instance: "", HandedBack: []int{0}}),
	} {
		require.NoError(t, tc.nc.Publish(ownership.HandbackSubject, data))
	}
	require.NoError(t, tc.nc.Flush())

	// Every instance has had rounds since it settled: none pulls from a
	// partition it does not hold (each holds its target). Each round
	// pings.
	var pings atomic.Int64
	counter, err := tc.nc.Subscribe("$SRV.PING.ctxd", func(*nats.Msg) { pings.Add(1) })
	require.NoError(t, err)
	require.Eventually(t, func() bool { return pings.Load() >= 9 }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, counter.Unsubscribe())
	after, _ := tc.settle()
	require.Equal(t, 0, moved(owners, after), "hostile notices moved partitions")

	leaver := tc.instances()[0]
	var gone []string
	for k, o := range after {
		if o == leaver.pid {
			gone = append(gone, streams.PartitionName(k))
		}
	}
	slices.Sort(gone)
	// The stopping instance still answers $SRV.PING, throughout.
	reply := replies[leaver.pid]
	require.NotNil(t, reply)
	ghost, err := tc.nc.Subscribe("$SRV.PING.ctxd", func(m *nats.Msg) { m.Respond(reply) })
	require.NoError(t, err)
	require.NoError(t, tc.nc.Flush())

	at := time.Now()
	tc.term(leaver)
	// (The survivors may hand a surplus back meanwhile: more unpins.)
	require.Eventually(t, func() bool {
		unpinned := pins.unpinnedSince(at)
		for _, c := range gone {
			if !slices.Contains(unpinned, c) {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "the stopping instance unpins every partition it held: %v, unpinned %v", gone, pins.unpinnedSince(at))
	pinned := func() []string {
		var out []string
		for _, c := range pins.pinnedSince(at) {
			if slices.Contains(gone, c) {
				out = append(out, c)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return slices.Equal(gone, pinned()) },
		20*time.Second, 10*time.Millisecond, "every partition handed back is pinned again; pinned: %v of %v", pinned(), gone)
	t.Logf("SIGTERM (3 -> 2): %s", pins.between(at, time.Now()))
	require.NoError(t, ghost.Unsubscribe())
	final, _ := tc.settle()
	t.Logf("2 instances: partitions per instance %v", perInstance(final))
	for _, in := range tc.instances() {
		tc.term(in)
	}
}

// handoff says, for the given consumers (a stopping instance's), the
// latest of their first unpins and of their first pins after at, and how
// many were not pinned again.
func (w *pinWatch) handoff(at time.Time, consumers []string) (lastUnpin, lastPin time.Duration, missing int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range consumers {
		var unpin, pin time.Duration = -1, -1
		for _, e := range w.events {
			if e.consumer != c || e.at.Before(at) {
				continue
			}
			if !e.pinned && unpin < 0 {
				unpin = e.at.Sub(at)
			}
			if e.pinned && pin < 0 {
				pin = e.at.Sub(at)
			}
		}
		if pin < 0 {
			missing++
			continue
		}
		lastUnpin, lastPin = max(lastUnpin, unpin), max(lastPin, pin)
	}
	return lastUnpin, lastPin, missing
}

// dump lists the pin events from at to end, for a look at a run.
func (w *pinWatch) dump(at, end time.Time) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, e := range w.events {
		if e.at.Before(at) || e.at.After(end) {
			continue
		}
		kind := "unpinned"
		if e.pinned {
			kind = "pinned"
		}
		fmt.Fprintf(&b, "\n  %8v %s %s", e.at.Sub(at).Round(100*time.Microsecond), e.consumer, kind)
	}
	return b.String()
}

// SIGTERM of an instance applying every partition of a partitioned
// stream, with many sessions in memory, writes the partitions'
// checkpoints as the unpartitioned ingest's are: in bulk, within
// --shutdown-checkpoints, one line for them all, exit 0; none is
// dropped by a partition's store on its own.
func TestProcess_ShutdownManySessionsPartitioned(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, "--port", "-1", "--data", dir, "--partitions", "4")
	c := newClient(t, p.url)
	n := *shutdownSessions
	fillSessions(t, c.js, n)
	// Every record applied by the partitions' ingests (one instance
	// holds all four).
	require.Eventually(t, func() bool {
		var records uint64
		for _, s := range statsOf(t, c.nc) {
			records += s.Records
		}
		return records >= uint64(n)
	}, 3*time.Minute, 50*time.Millisecond, "every record applied")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	err := p.wait(t)
	stderr := p.stderr.String()
	var summary []string
	deadline := 0
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.Contains(l, "checkpoints at shutdown") {
			summary = append(summary, l)
			t.Log(l)
		}
		if strings.Contains(l, "deadline exceeded") {
			deadline++
		}
		require.NotContains(t, l, "checkpoints dropped", "a partition's store dropped its checkpoints")
	}
	require.NoError(t, err, "tail of stderr: %s", tail(stderr, 2000))
	require.Len(t, summary, 1, "one line says what was written and what was not")
	require.Contains(t, summary[0], "partitions=4")
	require.LessOrEqual(t, deadline, 1)

	// Every session is served after a restart, with or without its
	// checkpoint.
	p2 := startProcess(t, "--port", "-1", "--data", dir, "--partitions", "4")
	c2 := newClient(t, p2.url)
	for _, s := range []int{0, n / 2, n - 1} {
		r := c2.fetchSeq(fmt.Sprintf("many%d", s), 0, false)
		require.Len(t, r.Messages, 1)
	}
	require.NoError(t, p2.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p2.wait(t))
}

// statsOf asks every instance on nc's server for its $SRV.STATS.
func statsOf(t testing.TB, nc *nats.Conn) []instanceStats {
	tc := &testCluster{t: t, nc: nc}
	return tc.stats()
}
