package bus_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

var clusterLoad = flag.Duration("cluster.load", 3*time.Second, "how long TestDirectReads_ClusterUnderLoad publishes and reads (-short: 1s)")

// ledger is what the publishers of a test had acknowledged.
type ledger struct {
	mu        sync.Mutex
	bySeq     map[uint64]published
	bySession map[string][]uint64
	high      uint64 // the highest sequence acknowledged
}

func (l *ledger) add(p published) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bySeq[p.seq] = p
	l.bySession[p.subject] = append(l.bySession[p.subject], p.seq)
	l.high = max(l.high, p.seq)
}

// session returns the highest sequence acknowledged and, sorted, the
// sequences of subject acknowledged so far: all of them are at or before
// that sequence, and a read up to it must hand on every one.
func (l *ledger) session(subject string) (uint64, []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seqs := slices.Clone(l.bySession[subject])
	slices.Sort(seqs)
	return l.high, seqs
}

// between returns, sorted, the sequences acknowledged in [from, to].
func (l *ledger) between(from, to uint64) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var seqs []uint64
	for seq := range l.bySeq {
		if seq >= from && seq <= to {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	return seqs
}

func (l *ledger) get(seq uint64) (published, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.bySeq[seq]
	return p, ok
}

// check compares what a read handed on with the acknowledged records it
// had to hand on: it returns how many of them are missing, and fails the
// test on a record out of order or different from the one acknowledged.
func (l *ledger) check(t *testing.T, what string, want []uint64, got []published) int {
	t.Helper()
	for i, p := range got {
		if i > 0 && p.seq <= got[i-1].seq {
			t.Errorf("%s: %d after %d", what, p.seq, got[i-1].seq)
		}
		if acked, ok := l.get(p.seq); ok && acked != p {
			t.Errorf("%s: %+v, acknowledged as %+v", what, p, acked)
		}
	}
	seen := make(map[uint64]bool, len(got))
	for _, p := range got {
		seen[p.seq] = true
	}
	missing := 0
	for _, seq := range want {
		if !seen[seq] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%s: %d of %d acknowledged records missing", what, missing, len(want))
	}
	return missing
}

// An R3 stream on three servers, publishers at full speed and readers on
// every server reading sessions, ranges and sequences while one follower
// is stopped and started again (a restarted follower catches up under
// load, the most behind a replica gets): every read hands on every
// record acknowledged before it started. The test prints how many reads
// met a replica behind.
func TestDirectReads_ClusterUnderLoad(t *testing.T) {
	load := *clusterLoad
	if testing.Short() {
		load = min(load, time.Second)
	}
	c := natstest.StartCluster(t, 3)
	setup, err := jetstream.New(c.Connect(t))
	require.NoError(t, err)
	leader := ensureR3Transcripts(t, c, setup)

	const sessions = 16
	subjectOf := func(i int) string { return fmt.Sprintf("transcripts.s%d", i) }
	l := &ledger{bySeq: map[uint64]published{}, bySession: map[string][]uint64{}}
	ctx, cancel := context.WithTimeout(context.Background(), load)
	defer cancel()

	// connect connects to node first, to another when it stops.
	connect := func(node *natstest.Node) (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect(node.URL+","+c.URLs(), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
		require.NoError(t, err)
		return nc, js
	}

	// Publishers, one on each server, a window of records in flight each.
	var wg sync.WaitGroup
	var acked, publishErrs atomic.Int64
	for i, node := range c.Nodes {
		_, js := connect(node)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for n := 0; ctx.Err() == nil; {
				type sent struct {
					p published
					f jetstream.PubAckFuture
				}
				var window []sent
				for range 64 {
					p := published{subject: subjectOf(rng.IntN(sessions)), data: fmt.Sprintf(`{"role":"user","content":"p%d %d"}`, i, n)}
					n++
					f, err := js.PublishAsync(p.subject, []byte(p.data))
					if err != nil {
						publishErrs.Add(1)
						break
					}
					window = append(window, sent{p, f})
				}
				for _, s := range window {
					select {
					case ack := <-s.f.Ok():
						s.p.seq = ack.Sequence
						l.add(s.p)
						acked.Add(1)
					case <-s.f.Err():
						publishErrs.Add(1) // not acknowledged: nothing to expect of it
					}
				}
			}
		})
	}

	// Readers, one on each server, once records are there. Replays are
	// fewer: each creates a consumer, a request to the meta leader; and
	// none starts while the follower is stopped, since an ordered consumer
	// placed on a stopping server waits for missed heartbeats (10 s) before
	// it is made again elsewhere.
	require.Eventually(t, func() bool { h, _ := l.session(""); return h > 0 }, 30*time.Second, time.Millisecond, "a record acknowledged")
	var holes, readErrs atomic.Int64
	var counts [5]atomic.Int64 // ReadSubject, ReadSeqs, ReadRange, LastOf, Replay
	var allUp atomic.Bool
	allUp.Store(true)
	before := bus.Reads()
	for i, node := range c.Nodes {
		nc, js := connect(node)
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			for n := 0; ctx.Err() == nil; n++ {
				kind := n % 4
				if n%16 == 15 && allUp.Load() {
					kind = 4
				}
				rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
				missing, err := readOnce(t, rctx, nc, js, l, subjectOf(rng.IntN(sessions)), kind)
				rcancel()
				holes.Add(int64(missing))
				if err != nil {
					readErrs.Add(1)
					t.Logf("read: %v", err)
					continue
				}
				counts[kind].Add(1)
			}
		})
	}

	// A follower stops for a quarter of the time, and comes back behind.
	follower := c.Nodes[0]
	if follower == leader {
		follower = c.Nodes[1]
	}
	time.Sleep(load / 4) // the fault's schedule, not a wait for a condition
	allUp.Store(false)
	follower.Stop()
	time.Sleep(load / 4)
	follower.Start(t)
	allUp.Store(true)
	wg.Wait()

	// And once more each kind of read, now the publishers have stopped
	// and the follower is catching up.
	nc, js := connect(follower)
	for kind := range counts {
		for i := range sessions {
			missing, err := readOnce(t, testContext(t), nc, js, l, subjectOf(i), kind)
			require.NoError(t, err)
			holes.Add(int64(missing))
			counts[kind].Add(1)
		}
	}

	after := bus.Reads()
	t.Logf("published %d records (%d publishes failed) in %v; reads: %d ReadSubject, %d ReadSeqs, %d ReadRange, %d LastOf, %d Replay; %d failed",
		acked.Load(), publishErrs.Load(), load, counts[0].Load(), counts[1].Load(), counts[2].Load(), counts[3].Load(), counts[4].Load(), readErrs.Load())
	t.Logf("validated reads: %d reads, %d stale replies, %d reads retried, %d reads asked the leader",
		after.Reads-before.Reads, after.Stale-before.Stale, after.Retried-before.Retried, after.Leader-before.Leader)
	require.Zero(t, holes.Load(), "acknowledged records missing from reads")
}

// readOnce makes one read of kind k (0 ReadSubject, 1 ReadSeqs, 2
// ReadRange, 3 LastOf, 4 Replay) of the latest records: subject's last 64
// as a session's load reads them, or the stream's last 300 as a gap fill
// or a rebuild does. It returns how many acknowledged records it missed.
func readOnce(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream, l *ledger, subject string, k int) (int, error) {
	high, seqs := l.session(subject)
	seqs = seqs[max(len(seqs)-64, 0):]
	first := high // of the subject's records read
	if len(seqs) > 0 {
		first = seqs[0]
	}
	from := high - min(high-1, 300) // of a range
	var got []published
	collect := func(seq uint64, data []byte) error {
		got = append(got, published{subject, seq, string(data)})
		return nil
	}
	collectAll := func(m bus.Msg) error {
		got = append(got, asPublished(m))
		return nil
	}
	var what string
	var err error
	want := seqs
	switch k {
	case 0:
		what = fmt.Sprintf("ReadSubject %s [%d, %d]", subject, first, high)
		err = bus.ReadSubject(ctx, nc, "TRANSCRIPTS", subject, first, high, collect)
	case 1:
		what = fmt.Sprintf("ReadSeqs of %s (%d)", subject, len(seqs))
		err = bus.ReadSeqs(ctx, nc, "TRANSCRIPTS", seqs, collect)
	case 2:
		what = fmt.Sprintf("ReadRange [%d, %d]", from, high)
		want = l.between(from, high)
		err = bus.ReadRange(ctx, nc, "TRANSCRIPTS", from, high, collectAll)
	case 3:
		// LastOf proves the subject's last record up to upTo: it is at or
		// after every record of the subject acknowledged up to there.
		what = "LastOf " + subject
		var last *bus.Msg
		var upTo uint64
		last, upTo, err = bus.LastOf(ctx, nc, "TRANSCRIPTS", subject)
		want = nil
		for _, seq := range seqs {
			if seq <= upTo && (last == nil || seq > last.Seq) {
				want = []uint64{seq}
			}
		}
		if last != nil {
			got = append(got, asPublished(*last))
		}
	case 4:
		what = fmt.Sprintf("Replay from %d", from)
		want = l.between(from, high)
		_, _, err = bus.Replay(ctx, js, "TRANSCRIPTS", from, func(m bus.Msg) { got = append(got, asPublished(m)) })
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return l.check(t, what, want, got), nil
}

// A replay started while the cluster has lost its quorum (two of three
// servers down, the meta and stream leaders with them) waits for it to
// come back, as a rebuild right after a node fault must, instead of
// failing after one request's timeout. The context has no deadline, as a
// rebuild's has none by default.
func TestReplay_WaitsForTheCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("two servers down for longer than a JetStream request's timeout (5 s)")
	}
	c := natstest.StartCluster(t, 3)
	setup, err := jetstream.New(c.Connect(t))
	require.NoError(t, err)
	ensureR3Transcripts(t, c, setup)
	const records = 50
	for i := range records {
		_, err := bus.Publish(testContext(t), setup, fmt.Sprintf("transcripts.s%d", i%4), []byte(`{"role":"user","content":"x"}`), "")
		require.NoError(t, err)
	}

	nc, err := nats.Connect(c.Nodes[0].URL, nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	c.Nodes[1].Stop()
	c.Nodes[2].Stop()

	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		n, _, err := bus.Replay(ctx, js, "TRANSCRIPTS", 1, func(bus.Msg) {})
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("replay ended while the cluster had no quorum: %d records, %v", r.n, r.err)
	case <-time.After(7 * time.Second):
	}
	c.Nodes[1].Start(t)
	c.Nodes[2].Start(t)
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Equal(t, records, r.n)
	case <-time.After(90 * time.Second):
		t.Fatal("replay did not end within 90 s of the cluster's return")
	}
}
