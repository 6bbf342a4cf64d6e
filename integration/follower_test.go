//go:build slow

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/workload"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// followStats is the part of an instance's $SRV.STATS the follower
// tests read.
type followStats struct {
	Instance        string            `json:"instance"`
	Role            string            `json:"role"`
	Replies         map[string]uint64 `json:"replies"` // by code
	Requests        uint64            `json:"-"`       // answered with a context
	FollowerReplies uint64            `json:"follower_replies"`
	StreamProbes    uint64            `json:"stream_probes"`
	FollowerApplied uint64            `json:"follower_applied"`
}

// followStatsOf asks every instance for its stats, by instance name.
func followStatsOf(t testing.TB, nc *nats.Conn) map[string]followStats {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.PublishRequest("$SRV.STATS.ctxd", inbox, nil))
	out := map[string]followStats{}
	for {
		m, err := sub.NextMsg(300 * time.Millisecond)
		if err != nil {
			return out
		}
		var reply struct {
			Endpoints []struct {
				Name string      `json:"name"`
				Data followStats `json:"data"`
			} `json:"endpoints"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &reply))
		for _, e := range reply.Endpoints {
			if e.Name == "context" {
				e.Data.Requests = e.Data.Replies["200"]
				out[e.Data.Instance] = e.Data
			}
		}
	}
}

// nameOf returns the instance name $SRV.STATS gives an instance.
func nameOf(t testing.TB, tc *testCluster, in *instance) string {
	t.Helper()
	// $SRV.STATS is gathered for 300 ms after the last answer: an
	// instance that answers later (a loaded machine) is asked again.
	var found string
	require.Eventually(t, func() bool {
		for name := range followStatsOf(t, tc.nc) {
			if strings.HasSuffix(name, ":"+strconv.Itoa(in.pid)) {
				found = name
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "instance %d in $SRV.STATS", in.pid)
	return found
}

// A request that reaches an instance without the ingest pin, with
// min_seq a fresh PubAck's, is answered from its follower, without a
// probe of the stream. (Before, every such request asked a replica for
// the session's last record first: one probe per request.)
func TestCluster_FollowerAnswersWithoutProbe(t *testing.T) {
	tc := startTestCluster(t, 2)
	c := newClient(t, tc.c.Nodes[0].URL)
	var recs []projection.Record
	publish := func() uint64 {
		v := record.NewMap("role", "user", "content", fmt.Sprintf("m%d", len(recs)))
		seq := c.publishValue("fw", v, false)
		recs = append(recs, projection.Record{Seq: seq, Value: v})
		return seq
	}
	publish()
	owner := tc.owner()
	var reader *instance
	for _, in := range tc.instances() {
		if in != owner {
			reader = in
		}
	}
	name := nameOf(t, tc, reader)

	// The follower starts with the first request the reader answers.
	require.Eventually(t, func() bool {
		c.fetchSeq("fw", publish(), false)
		return followStatsOf(t, tc.nc)[name].FollowerApplied > 0
	}, 30*time.Second, 10*time.Millisecond, "the reader's follower starts")

	before := followStatsOf(t, tc.nc)[name]
	for i := range 40 {
		seq := publish()
		// The follower has the record (no wall clock decides): a request
		// that reaches the reader needs no wait, and no probe.
		require.Eventually(t, func() bool {
			return followStatsOf(t, tc.nc)[name].FollowerApplied >= seq
		}, 30*time.Second, time.Millisecond, "the follower reads record %d", seq)
		r := c.fetchSeq("fw", seq, false)
		require.Equal(t, seq, r.Seq, "request %d", i)
		requireMessages(t, projection.Build(recs, projection.Options{}).Messages, r.Messages)
	}
	after := followStatsOf(t, tc.nc)[name]
	answered := after.Requests - before.Requests
	t.Logf("reader: %d requests, %d answered by its follower, %d probes of the stream", answered, after.FollowerReplies-before.FollowerReplies, after.StreamProbes-before.StreamProbes)
	require.NotZero(t, answered, "the queue group sent the reader none of 40 requests")
	require.Equal(t, answered, after.FollowerReplies-before.FollowerReplies, "every request the reader answered, its follower answered")
	require.Equal(t, before.StreamProbes, after.StreamProbes, "the reader probed the stream")
	require.Equal(t, "reader", after.Role)
}

// Every reply, from whichever of three instances answers (the ingest's
// store, a follower's, or a probe of the stream), equals Build over the
// session's records up to its seq, at or past its min_seq, while records
// are published and a session's subject is purged: no reply mixes
// records from before the purge with records after it.
func TestCluster_FollowerEquivalence(t *testing.T) {
	tc := startTestCluster(t, 3)
	const sessions = 4
	const purged = "fe1"
	type sent struct {
		session string
		minSeq  uint64
		data    []byte
	}
	var (
		mu      sync.Mutex
		recs    = map[string][]projection.Record{} // by session, in order
		lastAck = map[string]uint64{}
		purgeAt uint64 // the purged session's records up to here were removed
		replies []sent
	)
	nc := tc.c.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	gen := workload.New(3, workload.Default.WithScreenshots(64, 10))
	pause := make(chan chan struct{}) // the writer waits while a purge is made
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the writer
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for n := 0; !stop.Load(); n++ {
			select {
			case resume := <-pause:
				<-resume
			default:
			}
			session := fmt.Sprintf("fe%d", rng.IntN(sessions))
			var v any = gen.User()
			if n%7 == 3 {
				v = gen.Answer()
			}
			data, err := record.MarshalJSON(v)
			if err != nil {
				t.Error(err)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ack, err := js.Publish(ctx, "transcripts."+session, data)
			cancel()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			recs[session] = append(recs[session], projection.Record{Seq: ack.Sequence, Value: v})
			lastAck[session] = ack.Sequence
			mu.Unlock()
		}
	}()
	for r := range 4 { // the readers: plain requests, spread over the instances
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := tc.c.Connect(t)
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for !stop.Load() {
				session := fmt.Sprintf("fe%d", rng.IntN(sessions))
				mu.Lock()
				minSeq := lastAck[session]
				mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				data, err := ctxdclient.Context(ctx, rc, session, ctxdclient.Request{MinSeq: minSeq, WaitMS: 15000})
				cancel()
				if err != nil {
					t.Errorf("%s (min_seq %d): %v", session, minSeq, err)
					return
				}
				mu.Lock()
				replies = append(replies, sent{session, minSeq, data})
				mu.Unlock()
			}
		}()
	}
	// Until every reader instance has its follower, and then some.
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range followStatsOf(t, tc.nc) {
			if s.Role == "reader" && s.FollowerReplies > 20 {
				n++
			}
		}
		return n == 2
	}, 60*time.Second, 50*time.Millisecond, "both readers answer from their followers")

	// The purge, with the writer held: the purged session's records up
	// to purgeAt are gone, every later one is past it.
	resume := make(chan struct{})
	pause <- resume
	mu.Lock()
	at := lastAck[purged]
	mu.Unlock()
	st, err := js.Stream(context.Background(), "TRANSCRIPTS")
	require.NoError(t, err)
	require.NoError(t, st.Purge(context.Background(), jetstream.WithPurgeSubject("transcripts."+purged)))
	mu.Lock()
	purgeAt = at
	mu.Unlock()
	close(resume)
	// Until the purged session has records again, seen by replies.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lastAck[purged] > purgeAt+20
	}, 60*time.Second, 50*time.Millisecond, "records after the purge")
	time.Sleep(500 * time.Millisecond) // some more replies after them
	stop.Store(true)
	wg.Wait()

	var wrong, empty int
	for _, r := range replies {
		truth := recs[r.session]
		minSeq := r.minSeq
		if r.session == purged {
			got := decodeReply(t, r.data)
			if got.Seq > purgeAt {
				// After the purge: its records only.
				n := 0
				for n < len(truth) && truth[n].Seq <= purgeAt {
					n++
				}
				truth = truth[n:]
			} else if got.Seq == 0 && minSeq <= purgeAt && minSeq > 0 {
				empty++ // every record it asked for was removed
				minSeq = 0
			}
		}
		if problem := checkReply(t, read{session: r.session, minSeq: minSeq, data: r.data}, truth); problem != "" {
			wrong++
			if wrong <= 5 {
				if r.session == purged && checkReply(t, read{session: r.session, minSeq: minSeq, data: r.data}, recs[r.session]) == "" {
					problem += " (it equals Build over the records the purge removed and those after it)"
				}
				t.Errorf("%s (min_seq %d): %s", r.session, r.minSeq, problem)
				if wrong == 1 {
					got := decodeReply(t, r.data)
					for i, m := range got.Messages {
						t.Logf("got[%d] %.160s", i, mustJSON(t, m))
					}
					for _, rec := range recs[r.session] {
						if rec.Seq <= got.Seq {
							t.Logf("record %d %.160s", rec.Seq, mustJSON(t, rec.Value))
						}
					}
				}
			}
		}
	}
	stats := followStatsOf(t, tc.nc)
	t.Logf("replies checked=%d wrong=%d (empty after the purge: %d); purged %s up to %d", len(replies), wrong, empty, purged, purgeAt)
	for _, s := range stats {
		t.Logf("%s: role=%s requests=%d follower_replies=%d stream_probes=%d", s.Instance, s.Role, s.Requests, s.FollowerReplies, s.StreamProbes)
	}
	require.Zero(t, wrong, "replies that differ from Build over the session's records up to their seq")
	require.Len(t, stats, 3)
	for _, s := range stats {
		require.NotZero(t, s.Requests, "%s answered no request", s.Instance)
	}
}

// The follower runs only while the instance is no owner: the reader that
// gains the pin stops its follower, and answers from its ingest store
// past what the follower showed; a new reader starts one.
func TestCluster_FollowerMovesWithPin(t *testing.T) {
	tc := startTestCluster(t, 2)
	c := newClient(t, tc.c.Nodes[0].URL)
	var recs []projection.Record
	publish := func() uint64 {
		v := record.NewMap("role", "user", "content", fmt.Sprintf("m%d", len(recs)))
		seq := c.publishValue("fm", v, false)
		recs = append(recs, projection.Record{Seq: seq, Value: v})
		return seq
	}
	publish()
	owner := tc.owner()
	var reader *instance
	for _, in := range tc.instances() {
		if in != owner {
			reader = in
		}
	}
	name, ownerName := nameOf(t, tc, reader), nameOf(t, tc, owner)
	require.Eventually(t, func() bool {
		c.fetchSeq("fm", publish(), false)
		return followStatsOf(t, tc.nc)[name].FollowerReplies > 0
	}, 30*time.Second, 10*time.Millisecond, "the reader answers from its follower")
	require.Zero(t, followStatsOf(t, tc.nc)[ownerName].FollowerApplied, "the owner runs no follower")

	// The owner stops: the reader gains the pin at the next record, and
	// its follower stops.
	tc.term(owner)
	var last uint64
	require.Eventually(t, func() bool {
		last = publish()
		s := followStatsOf(t, tc.nc)[name]
		return s.Role == "ingest" && s.FollowerApplied == 0
	}, 30*time.Second, 20*time.Millisecond, "the new owner stops its follower")
	require.Contains(t, stderrOf(reader.p), "follower stopped")
	for range 5 {
		r := c.fetchSeq("fm", last, false)
		require.Equal(t, last, r.Seq)
		requireMessages(t, projection.Build(recs, projection.Options{}).Messages, r.Messages)
		last = publish()
	}

	// A new instance is a reader: its follower starts when it answers.
	next := tc.startInstance()
	nextName := nameOf(t, tc, next)
	require.Eventually(t, func() bool {
		last = publish()
		r := c.fetchSeq("fm", last, false)
		require.Equal(t, last, r.Seq)
		requireMessages(t, projection.Build(recs, projection.Options{}).Messages, r.Messages)
		return followStatsOf(t, tc.nc)[nextName].FollowerReplies > 0
	}, 30*time.Second, 10*time.Millisecond, "the new reader answers from its follower")
	require.Zero(t, followStatsOf(t, tc.nc)[name].FollowerApplied, "the owner runs no follower")
}
