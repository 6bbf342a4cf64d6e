package server

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// BenchmarkService_DeltaTurn is a closed-loop turn: a tool call and its
// result are applied, and the context is fetched as msgpack against the
// reply held (have_seq, have_digest), the delta applied to it. It
// reports the bytes sent per turn against the bytes of the turn's
// records, and the fetch's p50 and p99 beside a bare request-reply of
// the delta's bytes (on a connection of its own), for sessions starting
// at 100, 1 000 and 10 000 messages; the delta's application by the
// client and a fetch of the whole reply, for comparison; in every format.
//
//	go test ./pkg/server -run '^$' -bench DeltaTurn -benchtime 300x
func BenchmarkService_DeltaTurn(b *testing.B) {
	for _, format := range render.Formats {
		for _, n := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/%d", format, n), func(b *testing.B) { benchDeltaTurn(b, string(format), n) })
		}
	}
}

func turnRecords(i int) (call, result []byte) {
	call = fmt.Appendf(nil, `{"role":"assistant","content":[{"type":"text","text":"looking at step %d"},{"type":"toolCall","id":"call-%d","name":"bash","arguments":{"command":"ls -la /work/step/%d"}}]}`, i, i, i)
	result = fmt.Appendf(nil, `{"role":"toolResult","toolCallId":"call-%d","toolName":"bash","content":[{"type":"text","text":"total 8\ndrwxr-xr-x 2 agent agent 4096 step-%d\n-rw-r--r-- 1 agent agent  120 notes.md"}]}`, i, i)
	return call, result
}

func benchDeltaTurn(b *testing.B, format string, n int) {
	url := natstest.Start(b)
	live := &liveSession{p: projection.New(projection.Options{})}
	seq := uint64(0)
	apply := func(raw []byte) {
		v, err := record.DecodeJSON(raw)
		require.NoError(b, err)
		seq++
		live.apply(seq, v)
	}
	apply([]byte(`{"role":"user","content":"start"}`))
	for i := 0; live.p.Len() < n; i++ {
		c, r := turnRecords(i)
		apply(c)
		apply(r)
	}
	svc := New(natstest.Connect(b, url), live.projections())
	require.NoError(b, svc.Open())
	b.Cleanup(func() { svc.Close() })
	nc := natstest.Connect(b, url)
	ask := func(kv ...any) []byte {
		kv = append([]any{"format", format}, kv...) // applied already: no min_seq
		body, err := record.MarshalMsgpack(record.NewMap(kv...))
		require.NoError(b, err)
		msg, err := nc.Request("ctxd.context.s", body, 30*time.Second)
		require.NoError(b, err)
		require.Empty(b, errorCode(msg))
		return msg.Data
	}
	held, err := protocol.Hold(ask("digest", true))
	require.NoError(b, err)

	// A bare request-reply of as many bytes as the latest delta, on a
	// connection of its own.
	var echo atomic.Pointer[[]byte]
	rc := natstest.Connect(b, url)
	sub, err := rc.Subscribe("bench.echo", func(m *nats.Msg) { m.Respond(*echo.Load()) })
	require.NoError(b, err)
	b.Cleanup(func() { sub.Unsubscribe() })
	require.NoError(b, rc.Flush())

	var sentBytes, recordBytes, wholeBytes int
	var fetches, bares, applies, wholes []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, r := turnRecords(100000 + i)
		recordBytes += len(c) + len(r)
		apply(c)
		apply(r)
		start := time.Now()
		d := ask("have_seq", held.Reply.Seq, "have_digest", held.Reply.Digest)
		fetches = append(fetches, time.Since(start))
		start = time.Now()
		held, err = held.Apply(d)
		require.NoError(b, err)
		applies = append(applies, time.Since(start))
		sentBytes += len(d)

		echo.Store(&d)
		start = time.Now()
		_, err = nc.Request("bench.echo", nil, 30*time.Second)
		require.NoError(b, err)
		bares = append(bares, time.Since(start))
	}
	b.StopTimer()
	// The whole reply, as before deltas, for comparison: after the
	// turns, whose fetches its megabytes would slow.
	for range 20 {
		start := time.Now()
		w := ask("digest", true)
		wholes = append(wholes, time.Since(start))
		wholeBytes = len(w)
	}
	fp50, fp99 := percentiles(fetches)
	bp50, bp99 := percentiles(bares)
	ap50, _ := percentiles(applies)
	wp50, _ := percentiles(wholes)
	b.ReportMetric(float64(sentBytes)/float64(b.N), "sent-B/turn")
	b.ReportMetric(float64(sentBytes)/float64(recordBytes), "sent/records")
	b.ReportMetric(float64(fp50)/1e3, "fetch-p50-µs")
	b.ReportMetric(float64(fp99)/1e3, "fetch-p99-µs")
	b.ReportMetric(float64(bp50)/1e3, "bare-p50-µs")
	b.ReportMetric(float64(bp99)/1e3, "bare-p99-µs")
	b.ReportMetric(float64(fp50)/float64(bp50), "p50/bare")
	b.ReportMetric(float64(ap50)/1e3, "apply-p50-µs")
	b.ReportMetric(float64(wp50)/1e3, "whole-p50-µs")
	b.Logf("%s, %d messages at the end: %d bytes sent a turn (%.2fx the records' %d), whole reply %d bytes; fetch p50 %.0f p99 %.0f µs, bare p50 %.0f p99 %.0f µs (%.2fx), the delta applied p50 %.0f µs, the whole reply p50 %.0f µs",
		format, len(held.Reply.Items), sentBytes/b.N, float64(sentBytes)/float64(recordBytes), recordBytes/b.N, wholeBytes,
		float64(fp50)/1e3, float64(fp99)/1e3, float64(bp50)/1e3, float64(bp99)/1e3, float64(fp50)/float64(bp50), float64(ap50)/1e3, float64(wp50)/1e3)
}
