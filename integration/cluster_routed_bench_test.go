//go:build slow

package integration

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/internal/workload"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

var routedPartitions = flag.Int("cluster.partitions", 16, "BenchmarkCluster_FetchRouted: partitions of the stream")

// BenchmarkCluster_FetchRouted is BenchmarkCluster_Fetch with 3 instances
// on a partitioned stream (-cluster.partitions, 16 by default), each
// request routed to its session's partition owner as pkg/client does
// with Request.Partitions. Instance i is connected to node i, the client
// to node 1. After every partition has one owner, it writes one
// 200-record session with one 200 KB screenshot per instance, each in a
// partition that instance owns, so that one owner shares the client's
// node and two are across a route.
//
// Each session's fetches are interleaved, request by request and in a
// turning order, with two others of the same bytes: the same routed
// request as a bare nats.Conn.RequestMsg (what pkg/client adds is one
// subscription per request, for chunked replies), and a bare NATS
// request-reply answered by a responder on the owner's node (a queue
// subscription there, as the owner's partition endpoint is), so that
// both cross the same route. It prints p50 and p99 per owner's node and
// over all, and the ratios to the bare request-reply.
//
//	go test -tags slow ./integration -run '^$' -bench '^BenchmarkCluster_FetchRouted$' -benchtime 2000x -v
func BenchmarkCluster_FetchRouted(b *testing.B) {
	P := *routedPartitions
	c := natstest.StartCluster(b, 3)
	tc := onClusterP(b, c, "bench", 0, P)
	// The stream first, with its replicas and partitions, then the others.
	var pids []int // by node
	for i := range c.Nodes {
		pids = append(pids, tc.startInstanceOn(c.Nodes[i].URL).pid)
	}
	// A partition is pinned at its first record delivered: one record in
	// each, and another while they settle.
	cl := newClient(b, c.Nodes[0].URL)
	first := map[int]string{}
	for i := 0; len(first) < P; i++ {
		s := fmt.Sprintf("pin%d", i)
		if _, ok := first[subject.Partition(s, P)]; !ok {
			first[subject.Partition(s, P)] = s
		}
	}
	pin, err := record.MarshalJSON(record.NewMap("role", "user", "content", "pin"))
	require.NoError(b, err)
	pinning, pinned := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pinned)
		for {
			for _, s := range first {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _ = cl.js.Publish(ctx, "transcripts."+s, pin) // settle fails if none is stored
				cancel()
			}
			select {
			case <-pinning:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	owners, took := tc.settle()
	close(pinning)
	<-pinned
	b.Logf("%d partitions over 3 instances, settled in %v", P, took.Round(time.Millisecond))

	// One session per instance, in a partition it owns.
	sessions := make([]string, len(pids))
	for node, pid := range pids {
		for i := 0; sessions[node] == ""; i++ {
			if s := fmt.Sprintf("bench%d", i); owners[subject.Partition(s, P)] == pid {
				sessions[node] = s
			}
		}
	}
	records := workload.New(1, workload.Default.WithScreenshots(200<<10, 200)).Records(200)
	bodies := make([][]byte, len(sessions))
	for node, s := range sessions {
		var last uint64
		for _, r := range records {
			last = cl.publishValue(s, r, false)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		body, err := ctxdclient.Context(ctx, cl.nc, s, ctxdclient.Request{MinSeq: last, WaitMS: 10000, Partitions: P})
		cancel()
		require.NoError(b, err)
		bodies[node] = body
	}
	// The bare responders: on each node, for the session its instance owns.
	for node := range c.Nodes {
		server := natstest.Connect(b, c.Nodes[node].URL)
		sub, err := server.QueueSubscribe(fmt.Sprintf("bare.%d", node), "bare", func(m *nats.Msg) {
			m.Respond(bodies[node])
		})
		require.NoError(b, err)
		b.Cleanup(func() { sub.Unsubscribe() })
		require.NoError(b, server.Flush())
	}
	routed := make([]string, len(sessions))
	for node, s := range sessions {
		subj, err := subject.PartitionContext(s, P)
		require.NoError(b, err)
		routed[node] = subj
		require.Equal(b, []int{pids[node]}, tc.owners()[subject.Partition(s, P)], "%s: the owner is still instance %d", s, node+1)
		b.Logf("node %d: instance %d owns %s (%d bytes), asked on %s", node+1, pids[node], s, len(bodies[node]), subj)
	}
	// Warm: every path has been taken.
	for range 10 {
		for node, s := range sessions {
			_, err := ctxdclient.Context(context.Background(), cl.nc, s, ctxdclient.Request{Partitions: P})
			require.NoError(b, err)
			cl.request(routed[node], nil, nil)
			cl.request(fmt.Sprintf("bare.%d", node), nil, nil)
		}
	}

	b.Run(fmt.Sprintf("P=%d", P), func(b *testing.B) {
		const (
			viaClient = iota // pkg/client, Request.Partitions
			viaRaw           // the routed subject, nats.Conn.RequestMsg
			viaBare          // the bare responder on the owner's node
			kinds
		)
		lat := make([][kinds][]time.Duration, len(sessions))
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			for node, s := range sessions {
				for j := range kinds {
					kind := (i + node + j) % kinds
					var n int
					var err error
					start := time.Now()
					switch kind {
					case viaClient:
						var body []byte
						body, err = ctxdclient.Context(ctx, cl.nc, s, ctxdclient.Request{Partitions: P})
						n = len(body)
					case viaRaw:
						var reply *nats.Msg
						if reply, err = cl.nc.Request(routed[node], nil, 10*time.Second); err == nil {
							n = len(reply.Data)
							if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
								err = fmt.Errorf("%s %s", code, reply.Header.Get("Nats-Service-Error"))
							}
						}
					case viaBare:
						var reply *nats.Msg
						if reply, err = cl.nc.Request(fmt.Sprintf("bare.%d", node), nil, 10*time.Second); err == nil {
							n = len(reply.Data)
						}
					}
					d := time.Since(start)
					if err != nil || n != len(bodies[node]) {
						b.Fatalf("%s, kind %d: %v (%d bytes, want %d)", s, kind, err, n, len(bodies[node]))
					}
					lat[node][kind] = append(lat[node][kind], d)
				}
			}
		}
		b.StopTimer()
		var all [kinds][]time.Duration
		row := func(name string, l [kinds][]time.Duration) (ratios [4]float64) {
			cp50, cp99 := percentiles(l[viaClient])
			rp50, rp99 := percentiles(l[viaRaw])
			bp50, bp99 := percentiles(l[viaBare])
			ratios = [4]float64{float64(cp50) / float64(bp50), float64(cp99) / float64(bp99),
				float64(rp50) / float64(bp50), float64(rp99) / float64(bp99)}
			b.Logf("%-22s client p50 %6.0f µs p99 %7.0f µs | raw p50 %6.0f µs p99 %7.0f µs | bare p50 %6.0f µs p99 %7.0f µs | client/bare %.2f %.2f | raw/bare %.2f %.2f",
				name, us(cp50), us(cp99), us(rp50), us(rp99), us(bp50), us(bp99), ratios[0], ratios[1], ratios[2], ratios[3])
			return ratios
		}
		for node := range sessions {
			where := "owner on the client's node"
			if node > 0 {
				where = fmt.Sprintf("owner on node %d", node+1)
			}
			row(where, lat[node])
			for k := range kinds {
				all[k] = append(all[k], lat[node][k]...)
			}
		}
		r := row("all", all)
		cp50, cp99 := percentiles(all[viaClient])
		bp50, bp99 := percentiles(all[viaBare])
		b.ReportMetric(us(cp50), "ctxd-p50-µs")
		b.ReportMetric(us(cp99), "ctxd-p99-µs")
		b.ReportMetric(us(bp50), "bare-p50-µs")
		b.ReportMetric(us(bp99), "bare-p99-µs")
		b.ReportMetric(r[0], "p50-ratio")
		b.ReportMetric(r[1], "p99-ratio")
		b.ReportMetric(r[2], "raw-p50-ratio")
		b.ReportMetric(r[3], "raw-p99-ratio")
	})
	for _, in := range tc.instances() {
		tc.term(in)
	}
}
