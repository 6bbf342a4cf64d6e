package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
)

// BenchmarkService_DeltaTurn is a closed-loop turn: a tool call and its
// result are applied, and the context is fetched as msgpack against the
// reply held (have_seq, have_digest), the delta applied to it. It
// reports the bytes sent per turn against the bytes of the turn's
// records, and the turn's latency beside a bare request-reply of the
// delta's bytes, for sessions of 100, 1 000 and 10 000 messages.
func BenchmarkService_DeltaTurn(b *testing.B) {
	for _, format := range []string{"neutral", "anthropic"} {
		for _, n := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/%d", format, n), func(b *testing.B) { benchDeltaTurn(b, format, n) })
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

	// A bare request-reply of as many bytes as a delta.
	var echo []byte
	sub, err := nc.Subscribe("bench.echo", func(m *nats.Msg) { m.Respond(echo) })
	require.NoError(b, err)
	b.Cleanup(func() { sub.Unsubscribe() })
	nc2 := natstest.Connect(b, url)

	var sentBytes, recordBytes int
	var turn, fetch, bare time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, r := turnRecords(100000 + i)
		recordBytes += len(c) + len(r)
		start := time.Now()
		apply(c)
		apply(r)
		asked := time.Now()
		d := ask("have_seq", held.Reply.Seq, "have_digest", held.Reply.Digest)
		fetch += time.Since(asked)
		held, err = held.Apply(d)
		require.NoError(b, err)
		turn += time.Since(start)
		sentBytes += len(d)

		echo = d
		start = time.Now()
		_, err = nc2.Request("bench.echo", nil, 30*time.Second)
		require.NoError(b, err)
		bare += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(sentBytes)/float64(b.N), "sent-B/turn")
	b.ReportMetric(float64(sentBytes)/float64(recordBytes), "sent/records")
	b.ReportMetric(float64(turn.Microseconds())/float64(b.N), "turn-µs")
	b.ReportMetric(float64(fetch.Microseconds())/float64(b.N), "fetch-µs")
	b.ReportMetric(float64(bare.Microseconds())/float64(b.N), "bare-µs")
	b.ReportMetric(float64(len(held.Body)), "context-B")
}
