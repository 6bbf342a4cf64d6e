//go:build !slow

package integration

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/workload"
)

// BenchmarkFetch compares a context fetch for a 200-record session with
// one 200 KB screenshot against a bare NATS request-reply returning the
// same bytes over the same loopback connection, interleaved request by
// request so both see the same machine. It reports the p50 and p99 of
// each and their ratios (goal: p50 within 1.5x, p99 within 2x).
//
// An op is two requests, one to ctxd and one to the bare responder, each
// answered with the whole reply: ns/op is their sum, and MB/s counts both
// replies' bytes.
func BenchmarkFetch(b *testing.B) {
	for _, format := range []string{"json", "msgpack"} {
		b.Run(format, func(b *testing.B) { benchmarkFetch(b, format == "msgpack") })
	}
}

func benchmarkFetch(b *testing.B, asMsgpack bool) {
	a := startApp(b, b.TempDir())
	c := newClient(b, a.URL())
	var last uint64
	// 200 records, one of them a browser result with a 200 KiB screenshot.
	for _, r := range workload.New(1, workload.Default.WithScreenshots(200<<10, 200)).Records(200) {
		last = c.publishValue("bench", r, false)
	}
	c.fetchSeq("bench", last, false)
	var hdr nats.Header
	if asMsgpack {
		hdr = nats.Header{"Accept": []string{"application/msgpack"}}
	}
	body := c.request("ctxd.context.bench", nil, hdr).Data
	require.Greater(b, len(body), 200<<10)

	// The baseline: a responder that returns the same bytes.
	server, err := nats.Connect(a.URL())
	require.NoError(b, err)
	defer server.Close()
	sub, err := server.Subscribe("bare.bench", func(m *nats.Msg) { m.Respond(body) })
	require.NoError(b, err)
	defer sub.Unsubscribe()
	require.NoError(b, server.Flush())

	ctxdMsg := &nats.Msg{Subject: "ctxd.context.bench", Header: hdr}
	bareMsg := &nats.Msg{Subject: "bare.bench"}
	ctxdLat := make([]time.Duration, 0, b.N)
	bareLat := make([]time.Duration, 0, b.N)
	b.SetBytes(2 * int64(len(body))) // both replies of an op
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, m := range []*nats.Msg{ctxdMsg, bareMsg} {
			if i%2 == 1 { // alternate which goes first
				m = []*nats.Msg{bareMsg, ctxdMsg}[j]
			}
			start := time.Now()
			reply, err := c.nc.RequestMsg(m, 10*time.Second)
			d := time.Since(start)
			if err != nil || len(reply.Data) != len(body) {
				b.Fatalf("request %s: %v", m.Subject, err)
			}
			if m == ctxdMsg {
				ctxdLat = append(ctxdLat, d)
			} else {
				bareLat = append(bareLat, d)
			}
		}
	}
	b.StopTimer()
	cp50, cp99 := percentiles(ctxdLat)
	bp50, bp99 := percentiles(bareLat)
	b.ReportMetric(us(cp50), "ctxd-p50-µs")
	b.ReportMetric(us(cp99), "ctxd-p99-µs")
	b.ReportMetric(us(bp50), "bare-p50-µs")
	b.ReportMetric(us(bp99), "bare-p99-µs")
	b.ReportMetric(float64(cp50)/float64(bp50), "p50-ratio")
	b.ReportMetric(float64(cp99)/float64(bp99), "p99-ratio")
	b.ReportMetric(float64(len(body)), "reply-bytes")
}
