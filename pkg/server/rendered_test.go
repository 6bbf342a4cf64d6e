package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/sessiongen"
	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

func TestParseRequest_FormatAndBudget(t *testing.T) {
	tests := []struct {
		name   string
		body   []byte
		format render.Format
		budget uint64
		has    bool
		bad    string
	}{
		{name: "no format: neutral", body: []byte(`{"min_seq":1}`), format: render.Neutral},
		{name: "neutral", body: []byte(`{"format":"neutral"}`), format: render.Neutral},
		{name: "empty string: neutral", body: []byte(`{"format":""}`), format: render.Neutral},
		{name: "anthropic", body: []byte(`{"format":"anthropic"}`), format: render.Anthropic},
		{name: "openai-chat", body: []byte(`{"format":"openai-chat"}`), format: render.OpenAIChat},
		{name: "openai-responses", body: []byte(`{"format":"openai-responses"}`), format: render.OpenAIResponses},
		{name: "gemini, msgpack", body: msgpackOf(t, "format", "gemini"), format: render.Gemini},
		{name: "budget", body: []byte(`{"format":"gemini","budget_tokens":100000}`), format: render.Gemini, budget: 100000, has: true},
		{name: "budget 0", body: []byte(`{"budget_tokens":0}`), format: render.Neutral, has: true},
		{name: "unknown format", body: []byte(`{"format":"claude"}`), bad: `unknown format "claude": want one of neutral, anthropic, openai-chat, openai-responses, gemini`},
		{name: "format of another case", body: []byte(`{"format":"Anthropic"}`), bad: "want one of"},
		{name: "format not a string", body: []byte(`{"format":1}`), bad: "format must be a string, got 1"},
		{name: "negative budget", body: []byte(`{"budget_tokens":-5}`), bad: "budget_tokens must be a non-negative integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := parseRequest(tt.body, "")
			if tt.bad != "" {
				require.Error(t, err)
				code, desc := errorReply(err)
				require.Equal(t, CodeBadRequest, code)
				require.Contains(t, desc, tt.bad)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.format, req.format)
			require.Equal(t, tt.budget, req.budget)
			require.Equal(t, tt.has, req.hasBudget)
		})
	}
}

// renderedSession has a call, a result after an interruption (moved), a
// duplicate result, and two screenshots.
func renderedSession(t testing.TB) *projection.Session {
	return sessionOf(t, []string{
		`{"role":"system","content":"You are careful."}`,
		`{"role":"user","content":"open the page"}`,
		`{"role":"assistant","content":[{"type":"text","text":"opening"},{"type":"toolCall","id":"functions.browser:1","name":"browser_use","arguments":{"url":"a"}}]}`,
		`{"role":"user","content":"quickly"}`,
		`{"role":"toolResult","toolCallId":"functions.browser:1","toolName":"browser_use","content":[{"type":"text","text":"p1"},{"type":"image","data":"AAAA","mimeType":"image/png"}]}`,
		`{"role":"toolResult","toolCallId":"functions.browser:1","content":"again"}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use","arguments":{"url":"b"}}]}`,
		`{"role":"toolResult","toolCallId":"b2","toolName":"browser_use","content":[{"type":"image","data":"BBBB","mimeType":"image/png"}]}`,
	})
}

func TestService_Formats(t *testing.T) {
	url := startNATS(t, 0)
	p := renderedSession(t)
	proj := &fakeProjections{view: viewOf(map[string]*projection.Session{"s1": p})}
	startService(t, url, proj)
	nc := connect(t, url)

	// Absent or neutral, the reply is today's, byte for byte.
	want := string(replyJSON("s1", p))
	for _, body := range []string{"", `{}`, `{"format":"neutral"}`, `{"format":""}`} {
		msg := request(t, nc, "ctxd.context.s1", []byte(body), nil)
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
		require.Equal(t, want, string(withoutDigest(t, msg.Data)), "body %q", body)
	}

	for _, f := range render.Formats[1:] {
		for _, asMsgpack := range []bool{false, true} {
			name := string(f) + "/json"
			if asMsgpack {
				name = string(f) + "/msgpack"
			}
			t.Run(name, func(t *testing.T) {
				body := []byte(`{"format":"` + string(f) + `"}`)
				if asMsgpack {
					body = msgpackOf(t, "format", string(f))
				}
				msg := request(t, nc, "ctxd.context.s1", body, nil)
				require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
				require.Equal(t, !asMsgpack, record.IsJSON(msg.Data))
				var v any
				var err error
				plain := withoutDigest(t, msg.Data)
				if asMsgpack {
					v, err = record.DecodeMsgpack(plain)
				} else {
					v, err = record.DecodeJSON(plain)
				}
				require.NoError(t, err)
				m := v.(*record.Map)

				wantBody, wantRep := render.Render(f, p.Messages(), render.Options{Seqs: p.MessageSeqs(nil)})
				keys := []string{"session", "seq", "format"}
				for _, mem := range wantBody.Fields.Members {
					keys = append(keys, mem.Key)
				}
				keys = append(keys, "dropped", "render", "usage")
				var got []string
				for _, mem := range m.Members {
					got = append(got, mem.Key)
				}
				require.Equal(t, keys, got)
				require.Equal(t, "s1", field(m, "session"))
				require.Equal(t, string(f), field(m, "format"))
				for _, mem := range wantBody.Fields.Members {
					requireEqualValues(t, mem.Value, field(m, mem.Key), mem.Key)
				}
				requireEqualValues(t, droppedOf(p.Dropped()), field(m, "dropped"), "dropped")
				requireEqualValues(t, wantRep.Map(f), field(m, "render"), "render")
				require.NotEmpty(t, wantRep.Changes, "the session needs changes")

				u := field(m, "usage").(*record.Map)
				bodyJSON, err := wantBody.AppendJSON(nil)
				require.NoError(t, err)
				requireEqualValues(t, render.Estimate(wantBody, len(bodyJSON)).Map(), u, "usage")
				images, _ := record.IntegerString(field(u, "images"))
				require.Equal(t, "1", images, "the latest screenshot; the earlier one is trimmed")
			})
		}
	}

	t.Run("unknown format", func(t *testing.T) {
		msg := request(t, nc, "ctxd.context.s1", []byte(`{"format":"bedrock"}`), nil)
		require.Equal(t, CodeBadRequest, errorCode(msg))
		require.Contains(t, msg.Header.Get(micro.ErrorHeader), "neutral, anthropic, openai-chat, openai-responses, gemini")
	})

	t.Run("a session without records", func(t *testing.T) {
		msg := request(t, nc, "ctxd.context.nobody", []byte(`{"format":"anthropic","budget_tokens":10}`), nil)
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
		require.Equal(t, `{"session":"nobody","seq":0,"format":"anthropic","messages":[],"dropped":{"unpaired_calls":[],"orphan_results":[],"images_omitted":0},"render":{"changes":[],"ends_with_assistant":false,"cache_breakpoint":null},"usage":{"bytes":15,"images":0,"input_tokens":4},"budget":{"tokens":10,"over":false}}`, string(withoutDigest(t, msg.Data)))
	})
}

func field(m *record.Map, k string) any { v, _ := m.Get(k); return v }

// Over budget, the reply names the latest record a compaction may start
// after without separating a call from its result; the neutral reply
// gains usage and budget only when a budget is asked for.
func TestService_Budget(t *testing.T) {
	url := startNATS(t, 0)
	p := renderedSession(t)
	proj := &fakeProjections{view: viewOf(map[string]*projection.Session{"s1": p})}
	startService(t, url, proj)
	nc := connect(t, url)

	for _, hdr := range []nats.Header{nil, {"Accept": []string{"application/msgpack"}}} {
		for _, f := range []string{"neutral", "anthropic", "gemini"} {
			body := []byte(`{"format":"` + f + `","budget_tokens":5}`)
			asMsgpack := hdr != nil
			if asMsgpack {
				body = msgpackOf(t, "format", f, "budget_tokens", int64(5))
			}
			msg := request(t, nc, "ctxd.context.s1", body, nil)
			require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
			var v any
			var err error
			plain := withoutDigest(t, msg.Data)
			if asMsgpack {
				v, err = record.DecodeMsgpack(plain)
			} else {
				v, err = record.DecodeJSON(plain)
			}
			require.NoError(t, err)
			m := v.(*record.Map)
			b := field(m, "budget").(*record.Map)
			require.Equal(t, true, field(b, "over"))
			seq, _ := record.IntegerString(field(b, "compact_before_seq"))
			// Records 3 (the call) to 6 (the duplicate) hang together; the
			// latest cut that separates no pair is before record 7.
			require.Equal(t, "7", seq, f)
			if f == "neutral" {
				var keys []string
				for _, mem := range m.Members {
					keys = append(keys, mem.Key)
				}
				require.Equal(t, []string{"session", "seq", "messages", "dropped", "usage", "budget"}, keys)
				requireEqualValues(t, p.Messages(), field(m, "messages"), "messages")
			}
		}
	}
}

// No format is the neutral format: a request without one and one naming
// neutral are the same request, answered from one kept reply.
func TestParseRequest_NeutralOnce(t *testing.T) {
	var reqs []contextRequest
	for _, body := range []string{`{"budget_tokens":5}`, `{"format":"neutral","budget_tokens":5}`, `{"format":"","budget_tokens":5}`} {
		req, err := parseRequest([]byte(body), "")
		require.NoError(t, err)
		require.True(t, req.rendered(), body)
		reqs = append(reqs, req)
	}
	require.Equal(t, keyOf(reqs[1]), keyOf(reqs[0]))
	require.Equal(t, keyOf(reqs[1]), keyOf(reqs[2]))
	for _, body := range []string{"", `{}`, `{"format":"neutral"}`} {
		req, err := parseRequest([]byte(body), "")
		require.NoError(t, err)
		require.Equal(t, render.Neutral, req.format, body)
		require.False(t, req.rendered(), body)
	}
}

// TestService_RenderedGrowth grows sessions a record at a time (generated
// ones, with compactions, trimmed screenshots, late and duplicate
// results, and a workload session with screenshots) and fetches each in a
// provider format after every record: the reply, rendered from the state
// kept with the one before, is a fresh rendering's byte for byte. A
// session is now and then fetched in another format, and with a budget,
// which replace the state kept or only the tail. Some sessions are asked
// for msgpack replies, and now and then for the other encoding, whose
// replies are a fresh msgpack rendering's byte for byte.
func TestService_RenderedGrowth(t *testing.T) {
	url := startNATS(t, 0)
	type grown struct {
		id     string
		f      render.Format
		recs   []any
		popt   projection.Options
		p      *projection.Session
		seq    uint64
		other  render.Format
		budget bool
		mp     bool // msgpack replies
	}
	var all []*grown
	sessions := map[string]*projection.Session{}
	for i, f := range render.Formats[1:] {
		for k := range 3 {
			seed := uint64(10*i + k + 1)
			r := rand.New(rand.NewPCG(seed, 3))
			g := sessiongen.New(r, sessiongen.Rules{Convert: projection.Convert, IsValidCompaction: projection.IsValidCompaction})
			popt := projection.Options{BrowserTools: g.BrowserTools()}
			all = append(all, &grown{id: fmt.Sprint("g", seed), f: f, recs: g.Session(40 + r.IntN(40)), popt: popt,
				other: render.Formats[1+(i+1)%4], budget: k >= 1, mp: k == 2})
		}
		all = append(all, &grown{id: fmt.Sprint("w", i), f: f, recs: workload.New(uint64(i+1), workload.Default.WithScreenshots(4<<10, 5)).Records(60),
			other: render.Formats[1+(i+2)%4], mp: i%2 == 0})
	}
	for _, s := range all {
		s.p = projection.New(s.popt)
		sessions[s.id] = s.p
	}
	var mu sync.Mutex // the service's view and the test's Apply take turns
	proj := &fakeProjections{view: func(_ context.Context, session string, fn func(*projection.Session)) error {
		mu.Lock()
		defer mu.Unlock()
		fn(sessions[session])
		return nil
	}}
	svc, _ := startService(t, url, proj)
	nc := connect(t, url)
	for step := 0; ; step++ {
		more := false
		for _, s := range all {
			if step >= len(s.recs) {
				continue
			}
			more = true
			mu.Lock()
			s.seq++
			s.p.Apply(s.seq, s.recs[step])
			mu.Unlock()
			f, req := s.f, contextRequest{format: s.f}
			body := `{"format":"` + string(f) + `"}`
			switch {
			case step%7 == 3:
				f, req = s.other, contextRequest{format: s.other}
				body = `{"format":"` + string(f) + `"}`
			case s.budget && step%5 == 2:
				req.budget, req.hasBudget = 1000, true
				body = `{"format":"` + string(f) + `","budget_tokens":1000}`
			}
			if s.mp != (step%11 == 5) {
				v, err := record.DecodeJSON([]byte(body))
				require.NoError(t, err)
				mp, err := record.AppendMsgpack(nil, v)
				require.NoError(t, err)
				body, req.msgpack = string(mp), true
			}
			msg := request(t, nc, "ctxd.context."+s.id, []byte(body), nil)
			require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
			mu.Lock()
			var want []byte
			var err error
			if req.msgpack {
				want, err = appendRenderedMsgpack(nil, s.id, s.p, req, svc.BrowserTools)
			} else {
				want, err = appendRenderedJSON(nil, s.id, s.p, req, svc.BrowserTools)
			}
			mu.Unlock()
			require.NoError(t, err)
			if string(want) != string(withoutDigest(t, msg.Data)) {
				t.Fatalf("%s, record %d, %s: the reply is not a fresh rendering's\nwant: %.3000s\ngot:  %.3000s", s.id, step+1, f, want, msg.Data)
			}
		}
		if !more {
			break
		}
	}
}

// Requests for one provider format that differ in what else they ask
// (a budget, the digest or not) share the rendering state of the
// format, one rendering going on from another's at the same version:
// each reply is a fresh rendering's, its digest that of its messages.
func TestService_RenderedMixedRequests(t *testing.T) {
	url := startNATS(t, 0)
	for fi, f := range render.Formats[1:] {
		t.Run(string(f), func(t *testing.T) {
			live := &liveSession{p: projection.New(projection.Options{})}
			startService(t, url, live.projections())
			nc := connect(t, url)
			g := sessiongen.New(rand.New(rand.NewPCG(uint64(fi+1), 7)), sessiongen.Rules{Convert: projection.Convert, IsValidCompaction: projection.IsValidCompaction})
			for step := 1; step <= 80; step++ {
				live.apply(uint64(step), g.Record())
				for k, body := range []string{`{"format":"` + string(f) + `","budget_tokens":2000}`, `{"format":"` + string(f) + `"}`, `{"format":"` + string(f) + `","digest":false}`} {
					got := okReply(t, request(t, nc, "ctxd.context.s"+string(rune('a'+fi)), []byte(body), nil))
					req := contextRequest{format: f}
					if k == 0 {
						req.budget, req.hasBudget = 2000, true
					}
					fresh, err := appendRenderedJSON(nil, "s"+string(rune('a'+fi)), live.p, req, nil)
					require.NoError(t, err)
					if k < 2 {
						got = withoutDigest(t, got)
					}
					require.Equal(t, string(fresh), string(got), "%s step %d body %s", f, step, body)
				}
			}
		})
	}
}
