package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// BenchmarkFetchFormats compares a fetch of a session rendered for a
// provider with today's neutral fetch of the same session: 200 records,
// one a browser result with a 200 KiB screenshot, over a real embedded
// nats-server, the two requests interleaved so that both see the same
// machine. It reports each one's p50 and p99 and their ratios (goal: at
// most 1.2).
//
// "unchanged" fetches the session as it is, again and again: the neutral
// reply comes from the session's cache, the rendered one from the
// service's (one rendered reply per session). "turn" appends a user
// message before each pair, as an agent's turn does: the neutral reply
// re-encodes only what changed, the rendered one is rendered whole.
//
//	go test ./pkg/server -run '^$' -bench FetchFormats -benchtime 1000x
func BenchmarkFetchFormats(b *testing.B) {
	for _, mode := range []string{"unchanged", "turn"} {
		for _, f := range render.Formats[1:] {
			b.Run(mode+"/"+string(f), func(b *testing.B) { benchmarkFetchFormat(b, f, mode == "turn") })
		}
	}
}

func benchmarkFetchFormat(b *testing.B, f render.Format, turn bool) {
	url := natstest.Start(b)
	p := projection.New(projection.Options{})
	recs := workload.New(1, workload.Default.WithScreenshots(200<<10, 200)).Records(200)
	for i, r := range recs {
		p.Apply(uint64(i+1), r)
	}
	seq := uint64(len(recs))
	svc := New(natstest.Connect(b, url), &fakeProjections{view: viewOf(map[string]*projection.Session{"bench": p})})
	require.NoError(b, svc.Open())
	b.Cleanup(func() { svc.Close() })
	nc := natstest.Connect(b, url)

	neutral := &nats.Msg{Subject: "ctxd.context.bench"}
	rendered := &nats.Msg{Subject: "ctxd.context.bench", Data: []byte(`{"format":"` + string(f) + `"}`)}
	var sizes [2]int
	fetch := func(k int, m *nats.Msg) time.Duration {
		start := time.Now()
		reply, err := nc.RequestMsg(m, 10*time.Second)
		d := time.Since(start)
		if err != nil || reply.Header.Get("Nats-Service-Error-Code") != "" {
			b.Fatalf("%s: %v %v", f, err, reply.Header)
		}
		sizes[k] = len(reply.Data)
		return d
	}
	fetch(0, neutral)
	fetch(1, rendered)
	require.Greater(b, sizes[0], 200<<10)
	g := workload.New(2, workload.Default)

	var lat [2][]time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		if turn {
			// No request is in flight: the service is done with p.
			seq++
			p.Apply(seq, g.User())
		}
		for k := range 2 {
			i := (k + n) % 2 // alternate which goes first
			lat[i] = append(lat[i], fetch(i, []*nats.Msg{neutral, rendered}[i]))
		}
	}
	b.StopTimer()
	np50, np99 := percentiles(lat[0])
	rp50, rp99 := percentiles(lat[1])
	b.ReportMetric(float64(np50)/1e3, "neutral-p50-µs")
	b.ReportMetric(float64(np99)/1e3, "neutral-p99-µs")
	b.ReportMetric(float64(rp50)/1e3, "format-p50-µs")
	b.ReportMetric(float64(rp99)/1e3, "format-p99-µs")
	b.ReportMetric(float64(rp50)/float64(np50), "p50-ratio")
	b.ReportMetric(float64(rp99)/float64(np99), "p99-ratio")
	b.Logf("%s: neutral p50 %.0f µs p99 %.0f µs (%d bytes); %s p50 %.0f µs p99 %.0f µs (%d bytes); ratio p50 %.2f p99 %.2f",
		map[bool]string{false: "unchanged", true: "turn"}[turn], float64(np50)/1e3, float64(np99)/1e3, sizes[0],
		f, float64(rp50)/1e3, float64(rp99)/1e3, sizes[1], float64(rp50)/float64(np50), float64(rp99)/float64(np99))
}

// TestService_RenderedMemory: asking a session for every format keeps at
// most one rendered reply for it, and the replies kept stay within the
// bound.
func TestService_RenderedMemory(t *testing.T) {
	url := natstest.Start(t)
	sessions := map[string]*projection.Session{}
	for i := range 3 {
		p := projection.New(projection.Options{})
		for k, r := range workload.New(uint64(i+1), workload.Default.WithScreenshots(64<<10, 50)).Records(60) {
			p.Apply(uint64(k+1), r)
		}
		sessions[fmt.Sprint("s", i)] = p
	}
	svc := New(natstest.Connect(t, url), &fakeProjections{view: viewOf(sessions)})
	svc.RenderCacheBytes = 2 * 160 << 10
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := natstest.Connect(t, url)
	for _, f := range render.Formats[1:] {
		for id := range sessions {
			reply, err := nc.Request("ctxd.context."+id, []byte(`{"format":"`+string(f)+`"}`), 10*time.Second)
			require.NoError(t, err)
			require.Empty(t, reply.Header.Get("Nats-Service-Error-Code"))
			svc.rendered.mu.Lock()
			require.LessOrEqual(t, svc.rendered.bytes, svc.RenderCacheBytes)
			require.LessOrEqual(t, len(svc.rendered.byID), len(sessions))
			require.Equal(t, svc.rendered.lru.Len(), len(svc.rendered.byID))
			svc.rendered.mu.Unlock()
		}
	}
	// Asked again, unchanged, a kept reply is the same bytes.
	id := "s0"
	a, err := nc.Request("ctxd.context."+id, []byte(`{"format":"gemini"}`), 10*time.Second)
	require.NoError(t, err)
	b, err := nc.Request("ctxd.context."+id, []byte(`{"format":"gemini"}`), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, a.Data, b.Data)
	// A change of the session is never served from the old reply.
	p := sessions[id]
	p.Apply(p.Seq()+1, record.NewMap("role", "user", "content", "one more"))
	c, err := nc.Request("ctxd.context."+id, []byte(`{"format":"gemini"}`), 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(c.Data), "one more")
}

// BenchmarkRender is the rendering alone of the same session, per format,
// as a JSON and as a msgpack reply; "neutral" is the neutral reply with a
// budget.
func BenchmarkRender(b *testing.B) {
	p := projection.New(projection.Options{})
	for i, r := range workload.New(1, workload.Default.WithScreenshots(200<<10, 200)).Records(200) {
		p.Apply(uint64(i+1), r)
	}
	for _, f := range render.Formats {
		for _, asMsgpack := range []bool{false, true} {
			name := string(f) + "/json"
			if asMsgpack {
				name = string(f) + "/msgpack"
			}
			b.Run(name, func(b *testing.B) {
				req := contextRequest{format: f, msgpack: asMsgpack, hasBudget: f == render.Neutral, budget: 1000}
				var buf []byte
				for b.Loop() {
					var err error
					if asMsgpack {
						buf, err = appendRenderedMsgpack(buf[:0], "bench", p, req, nil)
					} else {
						buf, err = appendRenderedJSON(buf[:0], "bench", p, req, nil)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.SetBytes(int64(len(buf)))
			})
		}
	}
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}
