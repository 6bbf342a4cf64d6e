package render_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

var incN = flag.Int("inc.n", 40, "generated sessions TestRenderJSON_Incremental grows")

// wholeJSON is the reference: Render of the whole context, its body's
// members (the JSON object without braces), report and usage.
func wholeJSON(t testing.TB, f render.Format, msgs []any, opt render.Options) ([]byte, render.Report, render.Usage) {
	t.Helper()
	body, rep := render.Render(f, msgs, opt)
	b, err := body.AppendJSON(nil)
	require.NoError(t, err)
	return b[1 : len(b)-1], rep, render.Estimate(body, len(b))
}

// whole is the reference rendering of a context.
type whole struct {
	body []byte
	rep  render.Report
	u    render.Usage
}

// requireSameRendering checks an incremental rendering against Render of
// the whole context.
func requireSameRendering(t testing.TB, what string, f render.Format, msgs []any, opt render.Options, got []byte, st *render.State) {
	t.Helper()
	var w whole
	w.body, w.rep, w.u = wholeJSON(t, f, msgs, opt)
	requireSame(t, what, f, w, got, st)
}

func requireSame(t testing.TB, what string, f render.Format, w whole, got []byte, st *render.State) {
	t.Helper()
	if string(w.body) != string(got) {
		t.Fatalf("%s, %s: the body differs from Render's\nwant: %.3000s\ngot:  %.3000s", what, f, w.body, got)
	}
	require.Equal(t, string(got), string(st.Body()), "%s, %s: the state's body", what, f)
	rep := w.rep
	if rep.Changes == nil {
		rep.Changes = []render.Change{}
	}
	gotRep := st.Report()
	if gotRep.Changes == nil {
		gotRep.Changes = []render.Change{}
	}
	require.Equal(t, rep, gotRep, "%s, %s: the report", what, f)
	require.Equal(t, w.u, st.Usage(), "%s, %s: the usage", what, f)
	wantRep, err := record.AppendJSON(nil, rep.Map(f))
	require.NoError(t, err)
	gotJSON, err := st.AppendReportJSON([]byte("x"))
	require.NoError(t, err)
	require.Equal(t, string(wantRep), string(gotJSON[1:]), "%s, %s: the report's encoding", what, f)
}

// TestRenderJSON_Incremental grows generated sessions a record at a time
// (compactions, which start over, screenshots trimmed as newer ones come,
// calls whose results come later or never, duplicates, runs of one role
// merged, ids reused) and renders each version from the State of the one
// before, in every format: the body, report and usage are Render's of the
// whole context every time. It also renders each version from the State
// of a version a few records older, and of another format, which must
// not matter.
func TestRenderJSON_Incremental(t *testing.T) {
	n := *incN
	if testing.Short() {
		n = 20
	}
	reused := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r := rand.New(rand.NewPCG(seed, 0x696e_6372))
		g := newGen(r)
		popt := projection.Options{BrowserTools: g.BrowserTools()}
		recs := g.Session(5 + r.IntN(70))
		s := projection.New(popt)
		prev := map[render.Format]*render.State{}
		fromPrev := map[render.Format]*render.State{} // rendered with SeqsFrom
		var history []map[render.Format]*render.State
		for i, v := range recs {
			s.Apply(uint64(i+1), v)
			msgs := s.Messages()
			opt := render.Options{Seqs: s.MessageSeqs(nil), BrowserTools: popt.BrowserTools}
			fromOpt := render.Options{SeqsFrom: s.MessageSeqsFrom, BrowserTools: popt.BrowserTools}
			states := map[render.Format]*render.State{}
			for k, f := range providers {
				what := fmt.Sprintf("seed %d, record %d", seed, i+1)
				var w whole
				w.body, w.rep, w.u = wholeJSON(t, f, msgs, opt)
				got, st, err := render.RenderJSON([]byte("x"), prev[f], f, msgs, opt)
				require.NoError(t, err)
				requireSame(t, what, f, w, got[1:], st)
				states[f] = st
				got, st, err = render.RenderJSON(nil, fromPrev[f], f, msgs, fromOpt)
				require.NoError(t, err)
				requireSame(t, what+" (sequences from SeqsFrom)", f, w, got, st)
				require.True(t, slices.Equal(opt.Seqs, st.Seqs()), what)
				fromPrev[f] = st
				if render.StartOf(st) > 0 {
					reused++
				}
				// From an older state, and from another format's.
				if len(history) > 3 {
					old := history[len(history)-4][f]
					got, st, err := render.RenderJSON(nil, old, f, msgs, opt)
					require.NoError(t, err)
					requireSame(t, what+" (from an older state)", f, w, got, st)
				}
				other := prev[providers[(k+1)%len(providers)]]
				got, st, err = render.RenderJSON(nil, other, f, msgs, opt)
				require.NoError(t, err)
				requireSame(t, what+" (from another format's state)", f, w, got, st)
			}
			prev = states
			history = append(history, states)
		}
	}
	t.Logf("%d renderings started after the first message", reused)
	require.Positive(t, reused)
}

// TestRenderJSON_KeptStatesUnchanged: rendering from a state never
// changes it, even twice from the same state (only the first rendering
// may append to its slices in place): every state keeps its bytes and
// report, and both renderings are right.
func TestRenderJSON_KeptStatesUnchanged(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		g := newGen(r)
		popt := projection.Options{BrowserTools: g.BrowserTools()}
		s := projection.New(popt)
		recs := g.Session(10 + r.IntN(40))
		type kept struct {
			st     *render.State
			body   string
			report render.Report
		}
		var all []kept
		var prev *render.State
		for i, v := range recs {
			s.Apply(uint64(i+1), v)
			opt := render.Options{Seqs: s.MessageSeqs(nil), BrowserTools: popt.BrowserTools}
			for _, f := range []render.Format{render.Anthropic, render.OpenAIResponses} {
				if prev != nil && prev.Format() != f {
					continue
				}
				var next *render.State
				for range 2 { // the second rendering from prev must not disturb the first
					got, st, err := render.RenderJSON(nil, prev, f, s.Messages(), opt)
					require.NoError(t, err)
					requireSameRendering(t, fmt.Sprintf("seed %d, record %d", seed, i+1), f, s.Messages(), opt, got, st)
					all = append(all, kept{st, string(st.Body()), cloneReport(st.Report())})
					if next == nil {
						next = st
					}
				}
				prev = next
			}
		}
		for _, k := range all {
			require.Equal(t, k.body, string(k.st.Body()))
			require.Equal(t, k.report, k.st.Report())
		}
	}
}

func cloneReport(r render.Report) render.Report {
	c := r
	c.Changes = append([]render.Change(nil), r.Changes...)
	if r.CacheBreakpoint != nil {
		bp := *r.CacheBreakpoint
		c.CacheBreakpoint = &bp
	}
	return c
}

// TestRenderJSON_Cases renders from the state of each shorter session of
// hand-made cases: a result that pairs a call held back, screenshot
// trimming, merges into the last message of the prefix, a late system
// message, a provider-executed call answered late.
func TestRenderJSON_Cases(t *testing.T) {
	cases := map[string][]string{
		"late result": {
			`{"role":"user","content":"go"}`,
			`{"role":"assistant","content":[{"type":"toolCall","id":"a","name":"bash","arguments":{}}]}`,
			`{"role":"user","content":"still there?"}`,
			`{"role":"user","content":"hello"}`,
			`{"role":"toolResult","toolCallId":"a","content":"done"}`,
			`{"role":"toolResult","toolCallId":"a","content":"again"}`,
			`{"role":"user","content":"next"}`,
		},
		"provider-executed answered late": {
			`{"role":"user","content":"search"}`,
			`{"role":"assistant","content":[{"type":"toolCall","id":"w","name":"web_search","arguments":{},"providerExecuted":true},{"type":"text","text":"looking"}]}`,
			`{"role":"user","content":"ok"}`,
			`{"role":"assistant","content":"more"}`,
			`{"role":"toolResult","toolCallId":"w","content":"found"}`,
			`{"role":"user","content":"thanks"}`,
		},
		"screenshots": {
			`{"role":"system","content":"sys"}`,
			`{"role":"user","content":"browse"}`,
			`{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use","arguments":{}}]}`,
			`{"role":"toolResult","toolCallId":"b1","toolName":"browser_use","content":[{"type":"image","data":"AAAA","mimeType":"image/png"}]}`,
			`{"role":"user","content":"more"}`,
			`{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use","arguments":{}}]}`,
			`{"role":"toolResult","toolCallId":"b2","toolName":"browser_use","content":[{"type":"image","data":"BBBB","mimeType":"image/png"}]}`,
			`{"role":"system","content":"late"}`,
			`{"role":"user","content":"and"}`,
		},
		"compaction": {
			`{"role":"user","content":"one"}`,
			`{"role":"assistant","content":"two"}`,
			`{"type":"compaction","messages":[{"role":"user","content":"summary"}]}`,
			`{"role":"user","content":"three"}`,
		},
	}
	for name, lines := range cases {
		t.Run(name, func(t *testing.T) {
			recs := make([]any, len(lines))
			for i, l := range lines {
				v, err := record.DecodeJSON([]byte(l))
				require.NoError(t, err)
				recs[i] = v
			}
			for _, f := range providers {
				s := projection.New(projection.Options{})
				var prev, prevMsgpack *render.State
				for i, v := range recs {
					s.Apply(uint64(i+1), v)
					opt := render.Options{Seqs: s.MessageSeqs(nil)}
					got, st, err := render.RenderJSON(nil, prev, f, s.Messages(), opt)
					require.NoError(t, err)
					requireSameRendering(t, fmt.Sprintf("%s, record %d", name, i+1), f, s.Messages(), opt, got, st)
					prev = st
					got, st, err = render.RenderMsgpack(nil, prevMsgpack, f, s.Messages(), opt)
					require.NoError(t, err)
					requireSameMsgpack(t, fmt.Sprintf("%s, record %d, msgpack", name, i+1), f, s.Messages(), opt, got, st)
					prevMsgpack = st
				}
			}
		})
	}
}

// TestRenderJSON_StateHoldsNoMessage: a state does not keep the neutral
// messages it rendered alive (the projection holds them, within its own
// bound): once the session's projection is gone, they are reclaimed while
// the state is kept.
func TestRenderJSON_StateHoldsNoMessage(t *testing.T) {
	for _, f := range providers {
		var msg weak.Pointer[record.Map]
		var st *render.State
		func() {
			s := projection.New(projection.Options{})
			for i, l := range []string{
				`{"role":"user","content":"go"}`,
				`{"role":"assistant","content":[{"type":"text","text":"on it"},{"type":"toolCall","id":"call 1","name":"bash tool","arguments":{"cmd":"ls"}}]}`,
				`{"role":"toolResult","toolCallId":"call 1","content":"a b c"}`,
				`{"role":"user","content":"next"}`,
			} {
				v, err := record.DecodeJSON([]byte(l))
				require.NoError(t, err)
				s.Apply(uint64(i+1), v)
			}
			msgs := s.Messages()
			msg = weak.Make(msgs[1].(*record.Map))
			var err error
			_, st, err = render.RenderJSON(nil, nil, f, msgs, render.Options{Seqs: s.MessageSeqs(nil)})
			require.NoError(t, err)
			require.NotEmpty(t, st.Report().Changes, "the report names the call's id and tool")
		}()
		for range 3 {
			runtime.GC()
		}
		require.Nil(t, msg.Value(), "%s: the state keeps a message alive", f)
		runtime.KeepAlive(st)
	}
}

// wholeMsgpack is the reference of a msgpack rendering: the members of
// Render's body as msgpack map entries, each as record.AppendMsgpack
// encodes it, their number, the report's encoding and the usage (of the
// body's JSON).
func wholeMsgpack(t testing.TB, f render.Format, msgs []any, opt render.Options) (body []byte, fields int, rep []byte, u render.Usage) {
	t.Helper()
	b, r := render.Render(f, msgs, opt)
	for _, m := range b.Fields.Members {
		body = record.AppendMsgpackString(body, m.Key)
		var err error
		body, err = record.AppendMsgpack(body, m.Value)
		require.NoError(t, err)
	}
	rep, err := record.AppendMsgpack(nil, r.Map(f))
	require.NoError(t, err)
	n, err := b.JSONLen()
	require.NoError(t, err)
	return body, len(b.Fields.Members), rep, render.Estimate(b, n)
}

// requireSameMsgpack checks a msgpack rendering against Render of the
// whole context, encoded.
func requireSameMsgpack(t testing.TB, what string, f render.Format, msgs []any, opt render.Options, got []byte, st *render.State) {
	t.Helper()
	body, fields, rep, u := wholeMsgpack(t, f, msgs, opt)
	if string(body) != string(got) {
		t.Fatalf("%s, %s: the msgpack body differs from Render's\nwant: %.600x\ngot:  %.600x", what, f, body, got)
	}
	require.Equal(t, string(got), string(st.Body()), "%s, %s: the state's body", what, f)
	require.Equal(t, fields, st.Fields(), "%s, %s: the body's members", what, f)
	require.Equal(t, u, st.Usage(), "%s, %s: the usage", what, f)
	gotRep, err := st.AppendReportMsgpack([]byte("x"))
	require.NoError(t, err)
	require.Equal(t, string(rep), string(gotRep[1:]), "%s, %s: the report's encoding", what, f)
}

// TestRenderMsgpack_Incremental is TestRenderJSON_Incremental for msgpack
// renderings: generated sessions grown a record at a time, each version
// rendered from the state of the one before, of an older one, of another
// format's and of a JSON rendering's, is Render's whole rendering
// encoded, in body, report and usage, at every step.
func TestRenderMsgpack_Incremental(t *testing.T) {
	n := *incN
	if testing.Short() {
		n = 20
	}
	reused := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r := rand.New(rand.NewPCG(seed, 0x6d70_696e))
		g := newGen(r)
		popt := projection.Options{BrowserTools: g.BrowserTools()}
		recs := g.Session(5 + r.IntN(70))
		s := projection.New(popt)
		prev := map[render.Format]*render.State{}
		var history []map[render.Format]*render.State
		var jsonPrev *render.State
		fromPrev := map[render.Format]*render.State{} // rendered with SeqsFrom
		for i, v := range recs {
			s.Apply(uint64(i+1), v)
			msgs := s.Messages()
			opt := render.Options{Seqs: s.MessageSeqs(nil), BrowserTools: popt.BrowserTools}
			fromOpt := render.Options{SeqsFrom: s.MessageSeqsFrom, BrowserTools: popt.BrowserTools}
			states := map[render.Format]*render.State{}
			for k, f := range providers {
				what := fmt.Sprintf("seed %d, record %d", seed, i+1)
				got, st, err := render.RenderMsgpack([]byte("x"), prev[f], f, msgs, opt)
				require.NoError(t, err)
				requireSameMsgpack(t, what, f, msgs, opt, got[1:], st)
				states[f] = st
				got, st, err = render.RenderMsgpack(nil, fromPrev[f], f, msgs, fromOpt)
				require.NoError(t, err)
				requireSameMsgpack(t, what+" (sequences from SeqsFrom)", f, msgs, opt, got, st)
				require.True(t, slices.Equal(opt.Seqs, st.Seqs()), what)
				fromPrev[f] = st
				if render.StartOf(st) > 0 {
					reused++
				}
				if len(history) > 3 {
					old := history[len(history)-4][f]
					got, st, err := render.RenderMsgpack(nil, old, f, msgs, opt)
					require.NoError(t, err)
					requireSameMsgpack(t, what+" (from an older state)", f, msgs, opt, got, st)
				}
				other := prev[providers[(k+1)%len(providers)]]
				got, st, err = render.RenderMsgpack(nil, other, f, msgs, opt)
				require.NoError(t, err)
				requireSameMsgpack(t, what+" (from another format's state)", f, msgs, opt, got, st)
				if k == 0 {
					// From a JSON rendering's state, and back.
					got, st, err = render.RenderMsgpack(nil, jsonPrev, f, msgs, opt)
					require.NoError(t, err)
					requireSameMsgpack(t, what+" (from a JSON rendering's state)", f, msgs, opt, got, st)
					got, jsonPrev, err = render.RenderJSON(nil, prev[f], f, msgs, opt)
					require.NoError(t, err)
					requireSameRendering(t, what+" (JSON from a msgpack rendering's state)", f, msgs, opt, got, jsonPrev)
				}
			}
			prev = states
			history = append(history, states)
		}
	}
	t.Logf("%d renderings started after the first message", reused)
	require.Positive(t, reused)
}

// TestRender_OverItsBuffer renders each version of generated sessions
// into the buffer of the rendering before, over its body and report (as
// the service does with a reply nothing reads any more), in every format,
// as JSON and as msgpack: the bytes, report and usage are Render's every
// time, whether the headers before the kept bytes keep their length or
// not.
func TestRender_OverItsBuffer(t *testing.T) {
	n := *incN
	if testing.Short() {
		n = 20
	}
	over := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r := rand.New(rand.NewPCG(seed, 0x6f76_6572))
		g := newGen(r)
		popt := projection.Options{BrowserTools: g.BrowserTools()}
		recs := g.Session(5 + r.IntN(90))
		for _, f := range providers {
			for _, mp := range []bool{false, true} {
				s := projection.New(popt)
				var prev *render.State
				var buf []byte
				for i, v := range recs {
					s.Apply(uint64(i+1), v)
					msgs := s.Messages()
					opt := render.Options{Seqs: s.MessageSeqs(nil), BrowserTools: popt.BrowserTools}
					what := fmt.Sprintf("seed %d, record %d, %s, msgpack %v", seed, i+1, f, mp)
					dst := []byte("H")
					if prev != nil && r.IntN(4) > 0 {
						dst = buf[:prev.BodyAt()] // over the one before
						over++
					}
					var got []byte
					var st *render.State
					var err error
					var wantBody, wantRep []byte
					var wantUsage render.Usage
					if mp {
						got, st, err = render.RenderMsgpack(dst, prev, f, msgs, opt)
						wantBody, _, wantRep, wantUsage = wholeMsgpack(t, f, msgs, opt)
					} else {
						got, st, err = render.RenderJSON(dst, prev, f, msgs, opt)
						var rep render.Report
						wantBody, rep, wantUsage = wholeJSON(t, f, msgs, opt)
						wantRep, err = record.AppendJSON(nil, rep.Map(f))
						require.NoError(t, err)
					}
					require.NoError(t, err)
					if string(wantBody) != string(got[1:]) {
						t.Fatalf("%s: the body differs from Render's\nwant: %.600x\ngot:  %.600x", what, wantBody, got[1:])
					}
					require.Equal(t, wantUsage, st.Usage(), what)
					at := len(got)
					if mp {
						got, err = st.AppendReportMsgpack(got)
					} else {
						got, err = st.AppendReportJSON(got)
					}
					require.NoError(t, err)
					require.Equal(t, string(wantRep), string(got[at:]), "%s: the report", what)
					buf, prev = got, st.In(got)
				}
			}
		}
	}
	t.Logf("%d renderings over the buffer before", over)
	require.Positive(t, over)
}

// TestRender_OverItsBufferAfterGaps is TestRender_OverItsBuffer with
// several records applied between renderings (a session fetched now and
// then), every rendering over the buffer of the one before, half of them
// in a buffer with no room past it, which the rendering outgrows as it
// writes.
func TestRender_OverItsBufferAfterGaps(t *testing.T) {
	n := *incN
	if testing.Short() {
		n = 20
	}
	over := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r := rand.New(rand.NewPCG(seed, 0x6761_7073))
		g := newGen(r)
		popt := projection.Options{BrowserTools: g.BrowserTools()}
		recs := g.Session(5 + r.IntN(90))
		for _, f := range providers {
			for _, mp := range []bool{false, true} {
				s := projection.New(popt)
				var prev *render.State
				var buf []byte
				for i, v := range recs {
					s.Apply(uint64(i+1), v)
					if i+1 < len(recs) && r.IntN(3) > 0 {
						continue // several records between renderings
					}
					msgs := s.Messages()
					opt := render.Options{Seqs: s.MessageSeqs(nil), BrowserTools: popt.BrowserTools}
					what := fmt.Sprintf("seed %d, record %d, %s, msgpack %v", seed, i+1, f, mp)
					dst := []byte("H")
					if prev != nil {
						dst = buf[:prev.BodyAt()] // over the one before
						if r.IntN(2) == 0 {
							// No room past the one before: the rendering
							// moves to a larger buffer as it goes.
							dst = buf[:prev.BodyAt():len(buf)]
						}
						over++
					}
					var got []byte
					var st *render.State
					var err error
					var wantBody, wantRep []byte
					var wantUsage render.Usage
					if mp {
						got, st, err = render.RenderMsgpack(dst, prev, f, msgs, opt)
						wantBody, _, wantRep, wantUsage = wholeMsgpack(t, f, msgs, opt)
					} else {
						got, st, err = render.RenderJSON(dst, prev, f, msgs, opt)
						var rep render.Report
						wantBody, rep, wantUsage = wholeJSON(t, f, msgs, opt)
						wantRep, err = record.AppendJSON(nil, rep.Map(f))
						require.NoError(t, err)
					}
					require.NoError(t, err)
					if string(wantBody) != string(got[1:]) {
						t.Fatalf("%s: the body differs from Render's\nwant: %.600x\ngot:  %.600x", what, wantBody, got[1:])
					}
					require.Equal(t, wantUsage, st.Usage(), what)
					at := len(got)
					if mp {
						got, err = st.AppendReportMsgpack(got)
					} else {
						got, err = st.AppendReportJSON(got)
					}
					require.NoError(t, err)
					require.Equal(t, string(wantRep), string(got[at:]), "%s: the report", what)
					buf, prev = got, st.In(got)
				}
			}
		}
	}
	t.Logf("%d renderings over the buffer before", over)
	require.Positive(t, over)
}

// TestRenderJSON_TurnComparesWhatChanged: a turn appended to a long
// session is rendered from the state before without comparing the
// session's messages one by one: the projection hands out the array it
// handed before, grown, and a rendering compares only what is new.
func TestRenderJSON_TurnComparesWhatChanged(t *testing.T) {
	s := projection.New(projection.Options{})
	seq := uint64(0)
	apply := func(line string) {
		t.Helper()
		v, err := record.DecodeJSON([]byte(line))
		require.NoError(t, err)
		seq++
		s.Apply(seq, v)
	}
	turn := func(i int) {
		apply(fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"step %d"},{"type":"toolCall","id":"call-%d","name":"bash","arguments":{"command":"ls %d"}}]}`, i, i, i))
		apply(fmt.Sprintf(`{"role":"toolResult","toolCallId":"call-%d","toolName":"bash","content":[{"type":"text","text":"listing %d"}]}`, i, i))
	}
	apply(`{"role":"user","content":"start"}`)
	for i := range 1000 {
		turn(i)
	}
	for _, f := range providers {
		for _, mp := range []bool{false, true} {
			renderWith := render.RenderJSON
			if mp {
				renderWith = render.RenderMsgpack
			}
			opt := func() render.Options { return render.Options{Seqs: s.MessageSeqs(nil)} }
			_, prev, err := renderWith(nil, nil, f, s.Messages(), opt())
			require.NoError(t, err)
			whole := 0 // turns whose array the projection had to move: compared whole
			for i := 1000; i < 1010; i++ {
				turn(i)
				msgs, o := s.Messages(), opt()
				got, st, err := renderWith(nil, prev, f, msgs, o)
				require.NoError(t, err)
				if mp {
					requireSameMsgpack(t, fmt.Sprintf("turn %d", i), f, msgs, o, got, st)
				} else {
					requireSameRendering(t, fmt.Sprintf("turn %d", i), f, msgs, o, got, st)
				}
				require.Positive(t, render.StartOf(st), "%s: rendered whole", f)
				if render.Compared(st) > 8 {
					whole++
				}
				prev = st
			}
			require.LessOrEqual(t, whole, 1, "%s (msgpack %v): turns that compared the session's messages one by one", f, mp)
		}
	}
}

// TestRenderJSON_TurnAllocatesWhatChanged: what a turn's rendering
// allocates, apart from the body it writes, does not grow with the
// session: in a session of 8 000 messages about what it is in one of
// 500 (the median of nine turns: a slice that grows past its capacity
// now and then moves).
func TestRenderJSON_TurnAllocatesWhatChanged(t *testing.T) {
	perTurn := func(f render.Format, mp bool, n int) uint64 {
		s := projection.New(projection.Options{})
		seq := uint64(0)
		apply := func(line string) {
			v, err := record.DecodeJSON([]byte(line))
			require.NoError(t, err)
			seq++
			s.Apply(seq, v)
		}
		turn := func(i int) {
			apply(fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"step %d"},{"type":"toolCall","id":"call-%d","name":"bash","arguments":{"command":"ls %d"}}]}`, i, i, i))
			apply(fmt.Sprintf(`{"role":"toolResult","toolCallId":"call-%d","toolName":"bash","content":[{"type":"text","text":"listing %d"}]}`, i, i))
		}
		apply(`{"role":"user","content":"start"}`)
		for i := 0; s.Len() < n; i++ {
			turn(i)
		}
		renderWith := render.RenderJSON
		if mp {
			renderWith = render.RenderMsgpack
		}
		_, prev, err := renderWith(nil, nil, f, s.Messages(), render.Options{Seqs: s.MessageSeqs(nil)})
		require.NoError(t, err)
		var allocs []uint64
		for i := range 9 {
			turn(n + i)
			msgs, opt := s.Messages(), render.Options{Seqs: s.MessageSeqs(nil)}
			dst := make([]byte, 0, 2*len(prev.Body())+1<<16) // the body is written, not grown
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, st, err := renderWith(dst, prev, f, msgs, opt)
			runtime.ReadMemStats(&after)
			require.NoError(t, err)
			require.Positive(t, render.StartOf(st))
			allocs = append(allocs, after.TotalAlloc-before.TotalAlloc)
			prev = st
		}
		slices.Sort(allocs)
		return allocs[len(allocs)/2]
	}
	for _, f := range providers {
		for _, mp := range []bool{false, true} {
			small, large := perTurn(f, mp, 500), perTurn(f, mp, 8000)
			t.Logf("%s (msgpack %v): %d bytes a turn at 500 messages, %d at 8 000", f, mp, small, large)
			require.Less(t, large, 2*small+4096, "%s (msgpack %v): a turn allocates with the session's length", f, mp)
		}
	}
}
