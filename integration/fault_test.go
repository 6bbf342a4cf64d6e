//go:build slow

package integration

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
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
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

var (
	faultKills    = flag.Int("fault.kills", 4, "SIGKILLs of ctxd in TestFault_KillUnderLoad (make fault-long: 25)")
	faultWriters  = flag.Int("fault.writers", 6, "concurrent writers in TestFault_KillUnderLoad")
	faultSessions = flag.Int("fault.sessions", 24, "sessions written in TestFault_KillUnderLoad")
)

// outcome of one publish.
type outcome struct {
	rid     string
	session string
	data    []byte
	seq     uint64 // 0 unless acked
	state   string // acked, failed, unknown
}

// storedRecord is a record the stream holds, found by its writer's rid.
type storedRecord struct {
	seq  uint64
	data []byte
}

// reconciled counts what the stream holds against what was published:
// acknowledged records missing or changed, records stored twice, records
// nobody published, and records stored whose acknowledgement was lost.
type reconciled struct {
	lost, duplicated, unexpected, storedUnacked int
}

// reconcile checks a session's publish outcomes against the records its
// subject holds, by rid, adds what it finds to n, and returns the records
// ctxd must serve in stream order: those acknowledged, and those stored
// whose acknowledgement was lost.
func reconcile(t testing.TB, outs []outcome, byRid map[string][]storedRecord, n *reconciled) []projection.Record {
	known := map[string]bool{}
	var recs []projection.Record
	for _, o := range outs {
		known[o.rid] = true
		got := byRid[o.rid]
		switch {
		case o.state == "acked" && (len(got) == 0 || got[0].seq != o.seq || !bytes.Equal(got[0].data, o.data)):
			n.lost++
		case len(got) > 1:
			n.duplicated++
		}
		switch {
		case o.state == "acked":
			recs = append(recs, projection.Record{Seq: o.seq, Value: mustDecode(t, string(o.data))})
		case len(got) > 0:
			n.storedUnacked++
			recs = append(recs, projection.Record{Seq: got[0].seq, Value: mustDecode(t, string(got[0].data))})
		}
	}
	for rid := range byRid {
		if !known[rid] {
			n.unexpected++
		}
	}
	slices.SortFunc(recs, func(a, b projection.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	return recs
}

// ctxd is killed with SIGKILL at random moments under a sustained load of
// writers over many sessions, and restarted each time; the writers read
// their writes and other sessions all along. Then:
//
//   - ctxd's part: every reply, during the load and after the kills,
//     equals Build over the session's records up to the reply's seq
//     (messages and dropped), its seq is one of the session's records and
//     at least the min_seq asked. The records are those the writers saw
//     acknowledged, at the acknowledged sequence, and those stored though
//     their acknowledgement was lost, read from the stream at the end;
//   - JetStream's part: every acknowledged record is in the stream at its
//     sequence, once, and nothing else is; these check the stream, not ctxd;
//   - a fresh rebuild --check finds no difference.
func TestFault_KillUnderLoad(t *testing.T) {
	// The server runs in the test process: ctxd is killed, the stream stays up.
	url := natstest.Start(t)
	args := []string{"--nats", url, "--cache-sessions", "8"} // a small cache: sessions load and evict all along
	p := startProcess(t, args...)
	var mu sync.Mutex
	procs := []*proc{p}

	var (
		stop     atomic.Bool
		outcomes = make(chan outcome, 1<<16)
		reads    = make(chan read, 1<<16)
		wg       sync.WaitGroup
	)
	for w := 0; w < *faultWriters; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			nc, err := nats.Connect(url)
			if err != nil {
				t.Error(err)
				return
			}
			defer nc.Close()
			js, _ := jetstream.New(nc)
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			// Small screenshots, often: trimming goes on all along.
			gen := workload.New(uint64(w), workload.Default.WithScreenshots(64, 10))
			n := 0
			for turn := 0; !stop.Load(); turn++ {
				session := fmt.Sprintf("f%d", rng.IntN(*faultSessions))
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
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					ack, err := js.Publish(ctx, "transcripts."+session, data, jetstream.WithMsgID(rid))
					cancel()
					o := outcome{rid: rid, session: session, data: data}
					switch {
					case err == nil:
						o.seq, o.state = ack.Sequence, "acked"
						lastAck = ack.Sequence
					case ctx.Err() != nil:
						o.state = "unknown"
					default:
						o.state = "failed"
					}
					outcomes <- o
				}
				// Read your write, or another session as it is, through
				// whichever ctxd is up.
				var r read
				switch {
				case turn%3 == 0 && lastAck > 0:
					r = read{session: session, minSeq: lastAck}
				case turn%3 == 1:
					r = read{session: fmt.Sprintf("f%d", rng.IntN(*faultSessions))}
				default:
					continue
				}
				rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
				for rctx.Err() == nil {
					data, err := ctxdclient.Context(rctx, nc, r.session, ctxdclient.Request{MinSeq: r.minSeq, WaitMS: 5000})
					if err != nil {
						time.Sleep(50 * time.Millisecond) // ctxd is restarting
						continue
					}
					r.data = data
					reads <- r
					break
				}
				rcancel()
			}
		}(w)
	}

	rng := rand.New(rand.NewPCG(42, 42))
	for k := 0; k < *faultKills; k++ {
		time.Sleep(time.Duration(150+rng.IntN(400)) * time.Millisecond)
		mu.Lock()
		cur := procs[len(procs)-1]
		require.NoError(t, cur.cmd.Process.Signal(syscall.SIGKILL))
		cur.wait(t)
		procs = append(procs, startProcess(t, args...))
		mu.Unlock()
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	close(outcomes)
	close(reads)

	// Tally what the writers saw.
	bySession := map[string][]outcome{}
	counts := map[string]int{}
	for o := range outcomes {
		counts[o.state]++
		bySession[o.session] = append(bySession[o.session], o)
	}
	require.Greater(t, counts["acked"], 100, "the load was too light to mean anything")

	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	last := procs[len(procs)-1]

	// JetStream's part: the stream holds what was acknowledged. And the
	// records ctxd must serve: those acknowledged, and those stored whose
	// acknowledgement was lost.
	var rc reconciled
	unsorted := 0
	truth := map[string][]projection.Record{} // per session, in stream order
	lastSeq := map[string]uint64{}
	for session, outs := range bySession {
		byRid := map[string][]storedRecord{}
		var order []uint64
		err := bus.ReadSubject(context.Background(), nc, "TRANSCRIPTS", "transcripts."+session, 1, ^uint64(0), func(seq uint64, data []byte) error {
			v, err := record.Decode(data)
			require.NoError(t, err)
			rid, _ := v.String("rid")
			byRid[rid] = append(byRid[rid], storedRecord{seq, bytes.Clone(data)})
			order = append(order, seq)
			return nil
		})
		require.NoError(t, err)
		if len(order) > 0 {
			lastSeq[session] = order[len(order)-1]
		}
		// ReadSubject reads in stream order by construction: this guards
		// the test's reading, not ctxd nor JetStream.
		if !slices.IsSorted(order) {
			unsorted++
		}
		truth[session] = reconcile(t, outs, byRid, &rc)
	}

	// ctxd's part: every reply, those of the load and one per session now.
	var during []read
	for r := range reads {
		during = append(during, r)
	}
	var after []read
	for session := range bySession {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		data, err := ctxdclient.Context(ctx, nc, session, ctxdclient.Request{MinSeq: lastSeq[session], WaitMS: 15000})
		cancel()
		require.NoError(t, err, session)
		after = append(after, read{session: session, minSeq: lastSeq[session], data: data})
	}
	var wrong, stale int
	for _, r := range append(slices.Clone(during), after...) {
		problem := checkReply(t, r, truth[r.session])
		if problem == "" {
			continue
		}
		wrong++
		if strings.HasPrefix(problem, "stale") {
			stale++
		}
		if wrong <= 5 {
			t.Errorf("%s (min_seq %d): %s", r.session, r.minSeq, problem)
		}
	}

	out, err := exec.Command(ctxdBinary(t), "rebuild", "--check", "--nats", url).CombinedOutput()
	require.NoError(t, err, "rebuild --check: %s", out)
	require.Contains(t, string(out), "no differences")

	t.Logf("load: kills=%d sessions=%d publishes acked=%d failed=%d unknown=%d, stored without an acknowledgement=%d",
		len(procs)-1, len(bySession), counts["acked"], counts["failed"], counts["unknown"], rc.storedUnacked)
	t.Logf("ctxd: reads=%d (during the load %d, after the kills %d) wrong=%d (of which stale, seq below min_seq: %d)",
		len(during)+len(after), len(during), len(after), wrong, stale)
	t.Logf("JetStream, not ctxd: lost=%d duplicated=%d unexpected=%d; the test's stream reads unsorted=%d",
		rc.lost, rc.duplicated, rc.unexpected, unsorted)
	require.NotZero(t, len(during), "reads during the load")
	require.Zero(t, wrong, "replies of ctxd that differ from Build over the session's records up to their seq")
	require.Zero(t, rc.lost, "JetStream: acknowledged records not in the stream at their sequence")
	require.Zero(t, rc.duplicated, "JetStream: records stored more than once despite their message id")
	require.Zero(t, rc.unexpected, "JetStream: records in the stream that nobody published")
	require.Zero(t, unsorted, "the test's stream reads out of order")
	require.NoError(t, last.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, last.wait(t))
}

// checkReply, the oracle of TestFault_KillUnderLoad, finds wrong replies.
func TestFault_CheckReply(t *testing.T) {
	recs := []projection.Record{
		{Seq: 3, Value: mustDecode(t, `{"role":"user","content":"fix the login button"}`)},
		{Seq: 5, Value: mustDecode(t, `{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"edit","arguments":{}}]}`)},
		{Seq: 9, Value: mustDecode(t, `{"role":"user","content":"and the logout one"}`)},
	}
	reply := func(session string, seq uint64, res projection.Result) []byte {
		data, err := record.MarshalJSON(record.NewMap("session", session, "seq", int64(seq), "messages", res.Messages,
			"dropped", mustDecode(t, string(mustJSON(t, res.Dropped)))))
		require.NoError(t, err)
		return data
	}
	build := func(n int) projection.Result { return projection.Build(recs[:n], projection.Options{}) }
	for _, tt := range []struct {
		name   string
		minSeq uint64
		data   []byte
		want   string // a prefix of the problem; "" for none
	}{
		{"the latest", 9, reply("s", 9, build(3)), ""},
		{"an earlier state, no min_seq", 0, reply("s", 5, build(2)), ""},
		{"nothing yet", 0, reply("s", 0, build(0)), ""},
		{"below min_seq", 9, reply("s", 5, build(2)), "stale"},
		{"seq of no record", 0, reply("s", 6, build(2)), "seq 6 is no record"},
		{"a record missing", 0, reply("s", 9, projection.Build(recs[1:], projection.Options{})), "messages at seq 9"},
		{"messages of another seq", 0, reply("s", 9, build(2)), "messages at seq 9"},
		{"dropped wrong", 0, reply("s", 5, projection.Result{Messages: build(2).Messages}), "dropped at seq 5"},
		{"another session", 0, reply("t", 9, build(3)), "reply for session"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := checkReply(t, read{session: "s", minSeq: tt.minSeq, data: tt.data}, recs)
			if tt.want == "" {
				require.Empty(t, got)
			} else {
				require.True(t, strings.HasPrefix(got, tt.want), "%q, want %q...", got, tt.want)
			}
		})
	}
}

// The same record published twice with one Nats-Msg-Id is stored and
// applied once.
func TestFault_DuplicateMsgIDAppliesOnce(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	ctx := context.Background()
	data := []byte(`{"role":"user","content":"once"}`)
	ack1, err := c.js.Publish(ctx, "transcripts.dup", data, jetstream.WithMsgID("m-1"))
	require.NoError(t, err)
	ack2, err := c.js.Publish(ctx, "transcripts.dup", data, jetstream.WithMsgID("m-1"))
	require.NoError(t, err)
	require.True(t, ack2.Duplicate)
	require.Equal(t, ack1.Sequence, ack2.Sequence)
	r := c.fetchSeq("dup", ack2.Sequence, false)
	require.Len(t, r.Messages, 1)
}

// A ctxd stopped (SIGSTOP) for longer than a pull's expiry, within the
// consumer's pinned TTL, keeps its pin and goes on where it was: the
// consumer acknowledges nothing, so nothing is redelivered, and every
// record is applied once, in order, whatever the stall held.
func TestFault_StalledConsumerAppliesOnce(t *testing.T) {
	url := natstest.Start(t)
	p := startProcess(t, "--nats", url)
	c := newClient(t, url)
	cons, err := c.js.Consumer(context.Background(), "TRANSCRIPTS", "ctxd")
	require.NoError(t, err)
	var recs []projection.Record
	for stall := 1; stall <= 3; stall++ {
		for i := 0; i < 100; i++ {
			v := record.NewMap("role", "user", "content", fmt.Sprintf("m%d-%d", stall, i))
			seq := c.publishValue("stall", v, false)
			recs = append(recs, projection.Record{Seq: seq, Value: v})
			if i == 50 {
				require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
			}
		}
		// Past a pull's expiry (1 s), within the consumer's pinned TTL
		// (3 s) less that expiry: ctxd keeps its pin.
		time.Sleep(1600 * time.Millisecond)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
		r := c.fetchSeq("stall", recs[len(recs)-1].Seq, false)
		requireMessages(t, projection.Build(recs, projection.Options{}).Messages, r.Messages)

		require.Eventually(t, func() bool {
			info, err := cons.Info(context.Background())
			return err == nil && info.NumPending == 0
		}, 20*time.Second, 10*time.Millisecond, "waiting for every record delivered")
		stats := mustDecode(t, string(c.request("$SRV.STATS.ctxd", nil, nil).Data)).(*record.Map)
		eps, _ := stats.Get("endpoints")
		data, _ := eps.([]any)[0].(*record.Map).Get("data")
		d, _ := data.(*record.Map).Get("duplicates")
		t.Logf("stall %d: duplicates ignored: %d", stall, d)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t))
}

// A record that decodes but breaks the projection's bound is quarantined
// and listed; its session's later records and other sessions go on.
func TestFault_PoisonRecordQuarantined(t *testing.T) {
	url := natstest.Start(t)
	p := startProcess(t, "--nats", url, "--max-session-bytes", "100000")
	c := newClient(t, url)
	c.publish("poison", []byte(`{"role":"user","content":"before"}`))
	bad := c.publish("poison", []byte(`{"role":"user","content":"`+strings.Repeat("x", 150000)+`"}`))
	c.publish("other", []byte(`{"role":"user","content":"elsewhere"}`))
	last := c.publish("poison", []byte(`{"role":"user","content":"after"}`))

	r := c.fetchSeq("poison", last, false)
	require.Equal(t, last, r.Seq)
	requireMessages(t, []any{mustDecode(t, `{"role":"user","content":"before"}`), mustDecode(t, `{"role":"user","content":"after"}`)}, r.Messages)
	r = c.fetchSeq("other", last, false)
	require.Len(t, r.Messages, 1)

	list := awaitRejected(t, c)
	require.Len(t, list, 1)
	entry := list[0].(*record.Map)
	seq, _ := entry.Get("seq")
	require.Equal(t, int64(bad), seq)
	reason, _ := entry.String("reason")
	require.Contains(t, reason, "quarantined")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t))
}

// A record quarantined by a load that no ingest met (stored before the
// instance started, so nothing is delivered and no pin is held) is
// listed too: ctxd.rejected lists what this instance's reads rejected as
// well as its ingest's.
func TestFault_PoisonRecordListedWithoutIngest(t *testing.T) {
	dir := t.TempDir()
	limit := func(c *app.Config) { c.MaxSessionBytes = 100000 }
	a := startApp(t, dir, limit)
	c := newClient(t, a.URL())
	c.publish("poison", []byte(`{"role":"user","content":"before"}`))
	bad := c.publish("poison", []byte(`{"role":"user","content":"`+strings.Repeat("x", 150000)+`"}`))
	last := c.publish("poison", []byte(`{"role":"user","content":"after"}`))
	require.NoError(t, a.Close())

	a = startApp(t, dir, limit)
	c = newClient(t, a.URL())
	r := c.fetchSeq("poison", last, false)
	require.Equal(t, last, r.Seq)
	require.Len(t, r.Messages, 2)

	list := mustDecode(t, string(c.request("ctxd.rejected", nil, nil).Data)).([]any)
	require.Len(t, list, 1)
	seq, _ := list[0].(*record.Map).Get("seq")
	require.Equal(t, int64(bad), seq)
}

// On a partitioned stream a rejected record is listed under the subject
// it is stored on (transcripts.<k>.<session>), where `nats stream get`
// and `nats stream subjects` find it, not the one it was published to.
func TestFault_RejectedOnAPartitionedStream(t *testing.T) {
	a := startApp(t, t.TempDir(), func(c *app.Config) { c.Partitions = 4 })
	c := newClient(t, a.URL())
	c.publish("bad", []byte(`{"role":"user","content":"before"}`))
	bad := c.publish("bad", []byte(`notjson`))
	last := c.publish("bad", []byte(`{"role":"user","content":"after"}`))
	r := c.fetchSeq("bad", last, false)
	require.Len(t, r.Messages, 2)

	list := awaitRejected(t, c)
	require.Len(t, list, 1)
	entry := list[0].(*record.Map)
	seq, _ := entry.Get("seq")
	require.Equal(t, int64(bad), seq)
	subj, _ := entry.String("subject")
	require.Equal(t, subject.Stored("bad", 4), subj)
	require.Equal(t, fmt.Sprintf("transcripts.%d.bad", subject.Partition("bad", 4)), subj)
}

// awaitRejected returns ctxd.rejected's list once it holds a record: the
// list is the ingest's, and a reply read from the stream may come before
// the ingest has met the record.
func awaitRejected(t *testing.T, c *client) []any {
	t.Helper()
	var list []any
	require.Eventually(t, func() bool {
		list = mustDecode(t, string(c.request("ctxd.rejected", nil, nil).Data)).([]any)
		return len(list) > 0
	}, 20*time.Second, 10*time.Millisecond)
	return list
}
