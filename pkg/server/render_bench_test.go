package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

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
// re-encodes only what changed, the rendered one renders only from the
// latest checkpoint before it (render.RenderJSON).
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

// TestService_RenderedMemory: asking sessions for every format keeps at
// most keptPerSession rendered replies with each session's projection,
// counted in what the projection says it holds (which the store's bound
// counts), none larger than RenderCacheBytes; a session asked again
// unchanged is served the kept reply, a changed one never the old reply,
// and a session asked for two formats in turn renders each from the
// reply before in that format. It logs the memory a live session holds
// with two formats in use.
func TestService_RenderedMemory(t *testing.T) {
	url := natstest.Start(t)
	sessions := map[string]*projection.Session{}
	var ids []string
	for i := range 5 {
		p := projection.New(projection.Options{})
		for k, r := range workload.New(uint64(i+1), workload.Default.WithScreenshots(64<<10, 50)).Records(60) {
			p.Apply(uint64(k+1), r)
		}
		id := fmt.Sprint("s", i)
		sessions[id] = p
		ids = append(ids, id)
	}
	var mu sync.Mutex // the service's view and the test's reads take turns
	proj := &fakeProjections{view: func(_ context.Context, session string, fn func(*projection.Session)) error {
		mu.Lock()
		defer mu.Unlock()
		fn(sessions[session])
		return nil
	}}
	// Room for every reply of these sessions but the largest.
	largest := 0
	for _, f := range render.Formats[1:] {
		for _, id := range ids {
			c := &renderCache{max: 1 << 40}
			_, r, err := c.appendJSON(nil, id, sessions[id], contextRequest{format: f}, nil)
			require.NoError(t, err)
			largest = max(largest, r.size)
			sessions[id].Keep(nil, 0)
		}
	}
	svc := New(natstest.Connect(t, url), proj)
	svc.RenderCacheBytes = largest - 1
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := natstest.Connect(t, url)

	fetch := func(id string, f render.Format) []byte {
		t.Helper()
		reply, err := nc.Request("ctxd.context."+id, []byte(`{"format":"`+string(f)+`"}`), 10*time.Second)
		require.NoError(t, err)
		require.Empty(t, reply.Header.Get("Nats-Service-Error-Code"))
		withoutDigest(t, reply.Data) // its digest checked
		return reply.Data
	}
	// held returns the replies kept with a session, checking the books.
	held := func(id string) []*cachedReply {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		p := sessions[id]
		rs := kept(p)
		require.LessOrEqual(t, len(rs), keptPerSession)
		sum := 0
		for _, r := range rs {
			own := len(r.reply)
			if r.state != nil {
				own += r.state.Size()
				// The state's body is the reply's: counted once.
				require.True(t, within(r.state.Body(), r.reply), "the state's body lies in the reply kept")
			}
			require.Equal(t, own, r.size)
			require.LessOrEqual(t, r.size, svc.RenderCacheBytes)
			sum += r.size
		}
		require.Equal(t, int64(sum), p.KeptBytes())
		return rs
	}

	hits, large := 0, 0
	for _, f := range render.Formats[1:] {
		for _, id := range ids {
			a := fetch(id, f)
			rs := held(id)
			if len(rs) == 0 || string(rs[0].reply) != string(a) || rs[0].state == nil {
				// With its state larger than RenderCacheBytes: kept
				// alone, or not at all.
				large++
				continue
			}
			require.Equal(t, f, rs[0].state.Format())
			// Asked again unchanged: the same bytes, from the same entry.
			b := fetch(id, f)
			require.Equal(t, a, b, "%s %s", id, f)
			if again := held(id); again[0] == rs[0] {
				hits++
			}
		}
	}
	require.Positive(t, large, "some replies are larger than the bound")
	require.Positive(t, hits)

	// A change of the session is never served from the old reply.
	id := ids[len(ids)-1]
	p := sessions[id]
	mu.Lock()
	p.Apply(p.Seq()+1, record.NewMap("role", "user", "content", "one more"))
	mu.Unlock()
	c := fetch(id, render.Gemini)
	require.Contains(t, string(c), "one more")

}

// TestService_RenderedTwoFormats: a session asked for two formats in
// turn, a record before each fetch, renders each from the reply before in
// its format, and holds both. It logs what a live session holds so.
func TestService_RenderedTwoFormats(t *testing.T) {
	url := natstest.Start(t)
	p := projection.New(projection.Options{})
	g := workload.New(1, workload.Default)
	seq := uint64(0)
	for _, r := range g.Session(1000) {
		seq++
		p.Apply(seq, r)
	}
	var mu sync.Mutex // the service's view and the test's Apply take turns
	proj := &fakeProjections{view: func(_ context.Context, session string, fn func(*projection.Session)) error {
		mu.Lock()
		defer mu.Unlock()
		fn(p)
		return nil
	}}
	svc := New(natstest.Connect(t, url), proj)
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := natstest.Connect(t, url)
	for i := range 12 {
		f := []render.Format{render.Anthropic, render.OpenAIResponses}[i%2]
		mu.Lock()
		for _, r := range g.Next() {
			seq++
			p.Apply(seq, r)
		}
		mu.Unlock()
		reply, err := nc.Request("ctxd.context.s", []byte(`{"format":"`+string(f)+`"}`), 10*time.Second)
		require.NoError(t, err)
		require.Empty(t, reply.Header.Get("Nats-Service-Error-Code"))
		mu.Lock()
		rs := kept(p)
		want, err := appendRenderedJSON(nil, "s", p, contextRequest{format: f}, nil)
		mu.Unlock()
		require.NoError(t, err)
		require.Equal(t, string(want), string(withoutDigest(t, reply.Data)))
		if i >= 2 {
			require.Len(t, rs, 2)
			require.Equal(t, f, rs[0].state.Format())
			require.Positive(t, rs[0].state.Start(), "%s: rendered from the reply before in its format", f)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	rs := kept(p)
	t.Logf("a live session of %d messages with two formats in use holds %d bytes of rendered replies and states: %s %d (reply %d), %s %d (reply %d)",
		len(p.Messages()), p.KeptBytes(), rs[0].key.format, rs[0].size, len(rs[0].reply), rs[1].key.format, rs[1].size, len(rs[1].reply))
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

// within reports whether b's bytes lie in buf's memory.
func within(b, buf []byte) bool {
	if len(b) == 0 || len(buf) == 0 {
		return len(b) == 0
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(buf))
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

// BenchmarkRenderTurn is the rendering alone of a reply after a new
// record, per format, as JSON and as msgpack: the session of
// BenchmarkFetchFormats grows by a user message, and the reply is
// rendered from the state kept with the one before, in the buffer of a
// reply nothing reads any more, as the service does ("neutral": the neutral
// reply, for comparison).
func BenchmarkRenderTurn(b *testing.B) {
	for _, f := range render.Formats {
		for _, asMsgpack := range []bool{false, true} {
			name := string(f) + "/json"
			if asMsgpack {
				name = string(f) + "/msgpack"
			}
			b.Run(name, func(b *testing.B) {
				p := projection.New(projection.Options{})
				recs := workload.New(1, workload.Default.WithScreenshots(200<<10, 200)).Records(200)
				for i, r := range recs {
					p.Apply(uint64(i+1), r)
				}
				seq := uint64(len(recs))
				g := workload.New(2, workload.Default)
				c := &renderCache{max: DefaultRenderCacheBytes}
				req := contextRequest{format: f, msgpack: asMsgpack}
				size := 0
				var buf []byte
				for b.Loop() {
					seq++
					p.Apply(seq, g.User())
					var out []byte
					var err error
					switch {
					case f == render.Neutral && asMsgpack:
						out, err = appendReplyMsgpack(buf[:0], "bench", p)
						buf = out
					case f == render.Neutral:
						out = replyJSON("bench", p)
					case asMsgpack:
						var r *cachedReply
						out, r, err = c.appendMsgpack(nil, "bench", p, req, nil)
						c.sent(r)
					default:
						var r *cachedReply
						out, r, err = c.appendJSON(nil, "bench", p, req, nil)
						c.sent(r)
					}
					if err != nil {
						b.Fatal(err)
					}
					size = len(out)
				}
				b.SetBytes(int64(size))
			})
		}
	}
}

// BenchmarkRenderedTurn is a runtime's call every turn: one agent step
// appended to a session of 1 000 messages with screenshots (workload's
// Default), then the context fetched with min_seq at the step's last
// record, as msgpack, in a provider format ("format"), beside the same
// fetch of the neutral context ("neutral") and a bare request-reply
// returning the rendered reply's bytes ("bare", a responder on a
// connection of its own, as the service has), the three requests in
// turn, which goes first rotating. It reports each one's p50 and p99 and
// the ratios of the rendered turn to bare and to neutral (targets: p50 at
// most 1.3x and p99 at most 1.5x of bare, p50 at most 1.2x of neutral).
//
//	go test ./pkg/server -run '^$' -bench RenderedTurn -benchtime 1000x
func BenchmarkRenderedTurn(b *testing.B) {
	for _, f := range render.Formats[1:] {
		b.Run(string(f), func(b *testing.B) { benchmarkRenderedTurn(b, f) })
	}
}

func benchmarkRenderedTurn(b *testing.B, f render.Format) {
	url := natstest.Start(b)
	p := projection.New(projection.Options{})
	g := workload.New(1, workload.Default)
	seq := uint64(0)
	for _, r := range g.Session(1000) {
		seq++
		p.Apply(seq, r)
	}
	proj := &fakeProjections{view: viewOf(map[string]*projection.Session{"bench": p}),
		wait: func(context.Context, uint64, time.Duration) error { return nil }}
	svc := New(natstest.Connect(b, url), proj)
	require.NoError(b, svc.Open())
	b.Cleanup(func() { svc.Close() })
	nc := natstest.Connect(b, url)

	// The bare responder answers with the latest rendered reply.
	var bare atomic.Pointer[[]byte]
	rc := natstest.Connect(b, url)
	sub, err := rc.Subscribe("bare.bench", func(m *nats.Msg) { m.Respond(*bare.Load()) })
	require.NoError(b, err)
	b.Cleanup(func() { sub.Unsubscribe() })
	require.NoError(b, rc.Flush())

	// A msgpack request body asks for a msgpack reply.
	ask := func(format string) *nats.Msg {
		m := record.NewMap("min_seq", seq)
		if format != "" {
			m.Set("format", format)
		}
		body, err := record.AppendMsgpack(nil, m)
		require.NoError(b, err)
		return &nats.Msg{Subject: "ctxd.context.bench", Data: body}
	}
	var sizes [3]int
	fetch := func(k int) time.Duration {
		m := []*nats.Msg{ask(string(f)), ask(""), {Subject: "bare.bench"}}[k]
		start := time.Now()
		reply, err := nc.RequestMsg(m, 10*time.Second)
		d := time.Since(start)
		if err != nil || reply.Header.Get("Nats-Service-Error-Code") != "" {
			b.Fatalf("%s: %v %v", f, err, reply.Header)
		}
		sizes[k] = len(reply.Data)
		if k == 0 {
			bare.Store(&reply.Data)
		}
		return d
	}
	step := func() {
		// No request is in flight: the service is done with p.
		for _, r := range g.Next() {
			seq++
			p.Apply(seq, r)
		}
	}
	for range 20 { // untimed
		step()
		for k := range 3 {
			fetch(k)
		}
	}
	require.Equal(b, sizes[0], sizes[2])

	var lat [3][]time.Duration
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		step() // both fetches after it see the new step first
		for k := range 3 {
			i := (k + n) % 3
			lat[i] = append(lat[i], fetch(i))
		}
	}
	b.StopTimer()
	names := []string{"format", "neutral", "bare"}
	var p50, p99 [3]time.Duration
	for k := range 3 {
		p50[k], p99[k] = percentiles(lat[k])
		b.ReportMetric(float64(p50[k])/1e3, names[k]+"-p50-µs")
		b.ReportMetric(float64(p99[k])/1e3, names[k]+"-p99-µs")
	}
	b.ReportMetric(float64(p50[0])/float64(p50[2]), "p50/bare")
	b.ReportMetric(float64(p99[0])/float64(p99[2]), "p99/bare")
	b.ReportMetric(float64(p50[0])/float64(p50[1]), "p50/neutral")
	b.Logf("%s turn, %d-byte reply (neutral %d): format p50 %.0f p99 %.0f µs; neutral p50 %.0f p99 %.0f µs; bare p50 %.0f p99 %.0f µs; format/bare p50 %.2f p99 %.2f; format/neutral p50 %.2f",
		f, sizes[0], sizes[1], float64(p50[0])/1e3, float64(p99[0])/1e3, float64(p50[1])/1e3, float64(p99[1])/1e3,
		float64(p50[2])/1e3, float64(p99[2])/1e3, float64(p50[0])/float64(p50[2]), float64(p99[0])/float64(p99[2]),
		float64(p50[0])/float64(p50[1]))
}
