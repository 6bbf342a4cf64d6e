package client

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
)

// BenchmarkDo compares Do, which sends from an inbox of its own to take
// pushed chunks, with nats.go's request-reply, which shares one
// subscription for every request, against a responder returning 2 KiB,
// interleaved; it reports the p50 of each.
func BenchmarkDo(b *testing.B) {
	url := natstest.Start(b)
	nc := natstest.Connect(b, url)
	srv := natstest.Connect(b, url)
	body := bytes.Repeat([]byte("x"), 2048)
	_, err := srv.Subscribe("bare", func(m *nats.Msg) { m.Respond(body) })
	require.NoError(b, err)
	require.NoError(b, srv.Flush())
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var do, req []time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := Do(ctx, nc, nats.NewMsg("bare")); err != nil {
			b.Fatal(err)
		}
		do = append(do, time.Since(start))
		start = time.Now()
		if _, err := nc.RequestMsgWithContext(ctx, nats.NewMsg("bare")); err != nil {
			b.Fatal(err)
		}
		req = append(req, time.Since(start))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	b.ReportMetric(p50(do), "do-p50-µs")
	b.ReportMetric(p50(req), "request-p50-µs")
}
