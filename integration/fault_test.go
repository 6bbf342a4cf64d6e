package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sort"
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
	"github.com/ctxd/ctxd/pkg/bus"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
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
	seq     uint64 // 0 unless acked
	state   string // acked, failed, unknown
}

// ctxd is killed with SIGKILL at random moments under a sustained load of
// writers over many sessions, and restarted each time. At the end, for
// every session, the served context equals Build over the session's
// records in stream order, every acknowledged record is there exactly
// once, and a fresh rebuild finds no difference.
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
		wg       sync.WaitGroup
		reads    atomic.Int64
		stale    atomic.Int64
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
			gen := newFaultRecords(rng)
			for n := 0; !stop.Load(); n++ {
				session := fmt.Sprintf("f%d", rng.IntN(*faultSessions))
				rid := fmt.Sprintf("w%d-%d", w, n)
				data := gen.next(rid)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				ack, err := js.Publish(ctx, "transcripts."+session, data, jetstream.WithMsgID(rid))
				cancel()
				o := outcome{rid: rid, session: session}
				switch {
				case err == nil:
					o.seq, o.state = ack.Sequence, "acked"
				case ctx.Err() != nil:
					o.state = "unknown"
				default:
					o.state = "failed"
				}
				outcomes <- o
				if err == nil && n%5 == 0 {
					// Read your write, through whichever ctxd is up.
					rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
					for rctx.Err() == nil {
						data, err := ctxdclient.Context(rctx, nc, session, ctxdclient.Request{MinSeq: ack.Sequence, WaitMS: 5000})
						if err != nil {
							time.Sleep(50 * time.Millisecond) // ctxd is restarting
							continue
						}
						var r struct{ Seq uint64 }
						if json.Unmarshal(data, &r) == nil && r.Seq < ack.Sequence {
							stale.Add(1)
						}
						reads.Add(1)
						break
					}
					rcancel()
				}
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
	var lost, duplicated, reordered, unexpected, differ int
	for session, outs := range bySession {
		// The stream is the truth: read the session back.
		var recs []projection.Record
		seen := map[string]int{}
		var order []uint64
		err := bus.ReadSubject(context.Background(), nc, "TRANSCRIPTS", "transcripts."+session, 1, ^uint64(0), func(seq uint64, data []byte) error {
			v, err := record.Decode(data)
			require.NoError(t, err)
			rid, _ := v.String("rid")
			seen[rid]++
			order = append(order, seq)
			recs = append(recs, projection.Record{Seq: seq, Value: v})
			return nil
		})
		require.NoError(t, err)
		known := map[string]bool{}
		for _, o := range outs {
			known[o.rid] = true
			switch {
			case o.state == "acked" && seen[o.rid] == 0:
				lost++
			case seen[o.rid] > 1:
				duplicated++
			}
		}
		for rid := range seen {
			if !known[rid] {
				unexpected++
			}
		}
		if !sort.SliceIsSorted(order, func(i, j int) bool { return order[i] < order[j] }) {
			reordered++
		}
		// What ctxd serves equals Build over the stream's records.
		lastSeq := recs[len(recs)-1].Seq
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		data, err := ctxdclient.Context(ctx, nc, session, ctxdclient.Request{MinSeq: lastSeq, WaitMS: 15000})
		cancel()
		require.NoError(t, err, session)
		r := decodeReply(t, data)
		want := projection.Build(recs, projection.Options{})
		if r.Seq != lastSeq || !record.Equal(asReplied(t, want.Messages, false), r.Messages) {
			differ++
			t.Errorf("%s: served context differs from Build over the stream (seq %d vs %d): %s", session, r.Seq, lastSeq, diffPath("", want.Messages, r.Messages))
		}
		// And Build over the acknowledged records, when nothing of unknown
		// outcome was stored.
		var acked []projection.Record
		for _, rec := range recs {
			rid, _ := rec.Value.(*record.Map).String("rid")
			for _, o := range outs {
				if o.rid == rid && o.state == "acked" {
					acked = append(acked, rec)
				}
			}
		}
		if len(acked) == len(recs) {
			require.True(t, record.Equal(projection.Build(acked, projection.Options{}).Messages, want.Messages))
		}
	}
	out, err := exec.Command(ctxdBinary(t), "rebuild", "--check", "--nats", url).CombinedOutput()
	require.NoError(t, err, "rebuild --check: %s", out)
	require.Contains(t, string(out), "no differences")

	t.Logf("kills=%d sessions=%d acked=%d failed=%d unknown=%d reads=%d stale=%d lost=%d duplicated=%d reordered=%d unexpected=%d differ=%d",
		len(procs)-1, len(bySession), counts["acked"], counts["failed"], counts["unknown"], reads.Load(), stale.Load(), lost, duplicated, reordered, unexpected, differ)
	require.Zero(t, lost, "lost")
	require.Zero(t, duplicated, "duplicated")
	require.Zero(t, reordered, "reordered")
	require.Zero(t, unexpected, "unexpected")
	require.Zero(t, stale.Load(), "stale reads")
	require.NoError(t, last.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, last.wait(t))
}

// faultRecords makes a realistic stream of records, each with a unique
// rid: calls, results, screenshots, shell runs, and compactions.
type faultRecords struct {
	rng *rand.Rand
	n   int
}

func newFaultRecords(rng *rand.Rand) *faultRecords { return &faultRecords{rng: rng} }

func (g *faultRecords) next(rid string) []byte {
	g.n++
	id := fmt.Sprintf("c%d", g.rng.IntN(6))
	var v *record.Map
	switch k := g.rng.IntN(10); {
	case k < 3:
		v = record.NewMap("role", "user", "content", "question "+rid)
	case k < 5:
		v = record.NewMap("role", "assistant", "content", []any{
			record.NewMap("type", "text", "text", "doing "+rid),
			record.NewMap("type", "toolCall", "id", id, "name", []string{"browser_use", "bash"}[g.rng.IntN(2)], "arguments", record.NewMap()),
		})
	case k < 8:
		v = record.NewMap("role", "toolResult", "toolCallId", id, "content", []any{
			record.NewMap("type", "text", "text", "result "+rid),
			record.NewMap("type", "image", "data", "AAAA", "mimeType", "image/png"),
		})
	case k < 9:
		v = record.NewMap("role", "bashExecution", "command", "ls", "output", "a\nb\n", "exitCode", int64(0))
	default:
		v = record.NewMap("type", "compaction", "at", "2026-01-01T00:00:00Z", "baseSeq", int64(1), "plannerVersion", int64(1),
			"summaryModelRef", "m", "qualityAudit", "passed", "summary", "s", "firstKeptIndex", int64(0),
			"tokensBefore", int64(10), "tokensAfter", int64(1),
			"messages", []any{record.NewMap("role", "user", "content", "summary at "+rid)})
	}
	v.Set("rid", rid)
	data, _ := record.MarshalJSON(v)
	return data
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

// A ctxd stopped (SIGSTOP) past its ack wait gets the records it held
// redelivered; each is applied once.
func TestFault_StalledConsumerRedeliveryAppliesOnce(t *testing.T) {
	url := natstest.Start(t)
	p := startProcess(t, "--nats", url, "--ack-wait", "1s")
	c := newClient(t, url)
	var recs []projection.Record
	for i := 0; i < 200; i++ {
		v := record.NewMap("role", "user", "content", fmt.Sprintf("m%d", i))
		seq := c.publishValue("stall", v, false)
		recs = append(recs, projection.Record{Seq: seq, Value: v})
		if i == 100 {
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
		}
	}
	time.Sleep(2500 * time.Millisecond) // past the ack wait
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
	r := c.fetchSeq("stall", recs[len(recs)-1].Seq, false)
	requireMessages(t, projection.Build(recs, projection.Options{}).Messages, r.Messages)

	cons, err := c.js.Consumer(context.Background(), "TRANSCRIPTS", "ctxd")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}, 20*time.Second, 10*time.Millisecond, "waiting for every record acknowledged")
	// The service saw records again and ignored them.
	stats := mustDecode(t, string(c.request("$SRV.STATS.ctxd", nil, nil).Data)).(*record.Map)
	eps, _ := stats.Get("endpoints")
	data, _ := eps.([]any)[0].(*record.Map).Get("data")
	dups, _ := data.(*record.Map).Get("duplicates")
	t.Logf("duplicates ignored: %v", dups)
	require.Greater(t, dups.(int64), int64(0), "nothing was redelivered: the stall did not hold any record")
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

	list := mustDecode(t, string(c.request("ctxd.rejected", nil, nil).Data)).([]any)
	require.Len(t, list, 1)
	entry := list[0].(*record.Map)
	seq, _ := entry.Get("seq")
	require.Equal(t, int64(bad), seq)
	reason, _ := entry.String("reason")
	require.Contains(t, reason, "quarantined")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t))
}
