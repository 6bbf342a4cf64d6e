package edits_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/sessiongen"
	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

func jsonValue(t testing.TB, s string) any {
	t.Helper()
	v, err := record.DecodeJSON([]byte(s))
	require.NoError(t, err, s)
	return v
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := record.MarshalJSON(v)
	require.NoError(t, err)
	return string(b)
}

// options estimates as the reply's usage does, in format f.
func options(f render.Format, seqs []uint64) edits.Options {
	return edits.Options{
		Seqs:        seqs,
		Tokens:      func(m []any) int { return render.Tokens(f, m, render.Options{}) },
		ValueTokens: func(v any) int { return render.ValueTokens(f, v) },
	}
}

// toolSession is a user prompt, then n calls of tool, each answered by a
// result of size bytes.
func toolSession(t testing.TB, n, size int, tool string) []any {
	t.Helper()
	msgs := []any{jsonValue(t, `{"role":"user","content":"fix the build"}`)}
	for i := range n {
		msgs = append(msgs,
			jsonValue(t, fmt.Sprintf(`{"role":"assistant","content":[{"type":"toolCall","id":"c%d","name":%q,"arguments":{"path":"src/f%d.go"}}]}`, i, tool, i)),
			jsonValue(t, fmt.Sprintf(`{"role":"toolResult","toolCallId":"c%d","toolName":%q,"content":[{"type":"text","text":%q}]}`, i, tool, strings.Repeat("x", size))))
	}
	return msgs
}

// A context over the trigger has its oldest results cleared until they
// save the excess, rounded up to the step; each keeps its place, id and
// pairing, and says what it was.
func TestApply_ToolResults(t *testing.T) {
	msgs := toolSession(t, 10, 4000, "read") // about 1000 tokens a result
	orig := mustJSON(t, msgs)
	opt := options(render.Neutral, nil)
	before := opt.Tokens(msgs)
	c := &edits.Config{ToolResults: &edits.ToolResults{TriggerTokens: uint64(before - 2500), HasTrigger: true, Keep: 3}}
	out, _, rep := edits.Apply(msgs, c, opt)
	require.Equal(t, orig, mustJSON(t, msgs), "the messages given are not modified")
	require.Len(t, rep.Cleared, 3, "2500 tokens over: three results of about 1000")
	require.Equal(t, before, rep.TokensBefore)
	require.LessOrEqual(t, rep.TokensAfter, before-2500)
	for i, cl := range rep.Cleared {
		require.Equal(t, fmt.Sprintf("c%d", i), cl.ID)
		require.Equal(t, "read", cl.Tool)
		require.Greater(t, cl.Tokens, 1000)
		m := out[2+2*i].(*record.Map)
		id, _ := m.String("toolCallId")
		require.Equal(t, cl.ID, id)
		require.Equal(t, fmt.Sprintf(`[{"type":"text","text":"[tool result cleared: read c%d, %d tokens]"}]`, i, cl.Tokens), mustJSON(t, get(m, "content")))
	}
	require.Equal(t, mustJSON(t, msgs[7:]), mustJSON(t, out[7:]), "the rest is whole")

	t.Run("step", func(t *testing.T) {
		// With a step of 5000 tokens, 2500 over clears 5000 worth: six
		// results, each saving its 1007 tokens less its notice's.
		c := &edits.Config{ToolResults: &edits.ToolResults{TriggerTokens: uint64(before - 2500), HasTrigger: true, Keep: 3, ClearAtLeastTokens: 5000}}
		_, _, rep := edits.Apply(msgs, c, opt)
		require.Len(t, rep.Cleared, 6)
	})
	t.Run("under the trigger", func(t *testing.T) {
		c := &edits.Config{ToolResults: &edits.ToolResults{TriggerTokens: uint64(before), HasTrigger: true, Keep: 3}}
		out, _, rep := edits.Apply(msgs, c, opt)
		require.Empty(t, rep.Cleared)
		require.Equal(t, orig, mustJSON(t, out))
	})
	t.Run("budget as trigger", func(t *testing.T) {
		c := &edits.Config{ToolResults: &edits.ToolResults{Keep: 3}}
		o := opt
		o.Budget, o.HasBudget = uint64(before-100), true
		_, _, rep := edits.Apply(msgs, c, o)
		require.Len(t, rep.Cleared, 1)
	})
	t.Run("keep and exclude", func(t *testing.T) {
		mixed := append(toolSession(t, 3, 4000, "memory"), toolSession(t, 3, 4000, "bash")[1:]...)
		c := &edits.Config{ToolResults: &edits.ToolResults{HasTrigger: true, Keep: 1, ExcludeTools: []string{"memory"}}}
		_, _, rep := edits.Apply(mixed, c, opt)
		// ids repeat (c0..c2 twice): the bash ones are cleared, all but the latest.
		require.Len(t, rep.Cleared, 2)
		for _, cl := range rep.Cleared {
			require.Equal(t, "bash", cl.Tool)
		}
	})
	t.Run("clear inputs", func(t *testing.T) {
		c := &edits.Config{ToolResults: &edits.ToolResults{TriggerTokens: uint64(before - 10), HasTrigger: true, Keep: 3, ClearInputs: true}}
		out, _, rep := edits.Apply(msgs, c, opt)
		require.Len(t, rep.Cleared, 1)
		require.Equal(t, `[{"type":"toolCall","id":"c0","name":"read","arguments":{}}]`, mustJSON(t, get(out[1].(*record.Map), "content")))
		require.Equal(t, mustJSON(t, msgs[3]), mustJSON(t, out[3]))
	})
	t.Run("openai and anthropic shapes", func(t *testing.T) {
		big := strings.Repeat("y", 4000)
		shaped := []any{
			jsonValue(t, `{"role":"assistant","content":"","tool_calls":[{"id":"o1","type":"function","function":{"name":"grep","arguments":"{\"q\":\"x\"}"}}]}`),
			jsonValue(t, `{"role":"tool","tool_call_id":"o1","content":"`+big+`"}`),
			jsonValue(t, `{"role":"assistant","content":[{"type":"tool_use","id":"a1","name":"read","input":{"p":1}}]}`),
			jsonValue(t, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"a1","content":"`+big+`"},{"type":"text","text":"go on"}]}`),
		}
		c := &edits.Config{ToolResults: &edits.ToolResults{HasTrigger: true, Keep: 0, ClearInputs: true}}
		out, _, rep := edits.Apply(shaped, c, opt)
		require.Len(t, rep.Cleared, 2)
		require.Equal(t, "grep", rep.Cleared[0].Tool)
		require.Equal(t, fmt.Sprintf(`{"role":"tool","tool_call_id":"o1","content":"[tool result cleared: grep o1, %d tokens]"}`, rep.Cleared[0].Tokens), mustJSON(t, out[1]))
		require.Contains(t, mustJSON(t, out[0]), `"arguments":"{}"`)
		require.Contains(t, mustJSON(t, out[2]), `"input":{}`)
		require.Contains(t, mustJSON(t, out[3]), `"content":"[tool result cleared: read a1, `)
		require.Contains(t, mustJSON(t, out[3]), `{"type":"text","text":"go on"}`)
	})
}

// Thinking goes from all but the last keep_turns assistant messages; the
// last one's stays with its tool call whatever keep_turns says.
func TestApply_Thinking(t *testing.T) {
	msgs := []any{
		jsonValue(t, `{"role":"user","content":"hi"}`),
		jsonValue(t, `{"role":"assistant","content":[{"type":"thinking","thinking":"a","signature":"s"},{"type":"text","text":"one"}]}`),
		jsonValue(t, `{"role":"assistant","content":[{"type":"thinking","thinking":"b","signature":"s"}]}`),
		jsonValue(t, `{"role":"assistant","content":[{"type":"redacted_thinking","data":"d"},{"type":"toolCall","id":"c1","name":"bash","arguments":{}}]}`),
		jsonValue(t, `{"role":"toolResult","toolCallId":"c1","content":"ok"}`),
	}
	out, seqs, rep := edits.Apply(msgs, &edits.Config{Thinking: &edits.Thinking{KeepTurns: 0}}, edits.Options{Seqs: []uint64{1, 2, 3, 4, 5}})
	require.Equal(t, []uint64{1, 2, 3, 4, 5}, seqs)
	require.Equal(t, `[{"type":"text","text":"one"}]`, mustJSON(t, get(out[1].(*record.Map), "content")))
	require.Equal(t, `{"role":"assistant","content":[]}`, mustJSON(t, out[2]), "a message of thinking alone stays, empty")
	require.Equal(t, mustJSON(t, msgs[3]), mustJSON(t, out[3]), "the last turn keeps its thinking with its tool call")
	require.Equal(t, []edits.Removed{{Seq: 2, Message: 1, Block: 0}, {Seq: 3, Message: 2, Block: 0}}, rep.ThinkingRemoved)

	out, _, rep = edits.Apply(msgs, &edits.Config{Thinking: &edits.Thinking{KeepTurns: 2}}, edits.Options{})
	require.Len(t, rep.ThinkingRemoved, 1)
	require.Len(t, out, 5)
}

// Images beyond the most recent keep are replaced by the notice, batch at
// a time: the count replaced is a multiple of batch.
func TestApply_Images(t *testing.T) {
	img := `{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}`
	var msgs []any
	for i := range 7 {
		msgs = append(msgs, jsonValue(t, fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"shot %d"},%s]}`, i, img)))
	}
	msgs = append(msgs,
		jsonValue(t, `{"role":"assistant","content":[{"type":"tool_use","id":"a1","name":"screenshot","input":{}}]}`),
		jsonValue(t, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"a1","content":[`+img+`]}]}`))
	// 8 images, keep 3, batch 2: 4 replaced.
	out, _, rep := edits.Apply(msgs, &edits.Config{Images: &edits.Images{Keep: 3, Batch: 2}}, edits.Options{})
	require.Len(t, rep.ImagesRemoved, 4)
	for i := range 4 {
		require.Equal(t, fmt.Sprintf(`[{"type":"text","text":"shot %d"},{"type":"text","text":%q}]`, i, projection.OmittedImageText), mustJSON(t, get(out[i].(*record.Map), "content")))
	}
	require.Equal(t, mustJSON(t, msgs[4:]), mustJSON(t, out[4:]))
	// keep 0, batch 3: 6 of 8, the tool_result's image among the kept.
	_, _, rep = edits.Apply(msgs, &edits.Config{Images: &edits.Images{Keep: 0, Batch: 3}}, edits.Options{})
	require.Len(t, rep.ImagesRemoved, 6)
	out, _, rep = edits.Apply(msgs, &edits.Config{Images: &edits.Images{Keep: 0, Batch: 1}}, edits.Options{})
	require.Len(t, rep.ImagesRemoved, 8)
	require.Equal(t, fmt.Sprintf(`[{"type":"tool_result","tool_use_id":"a1","content":[{"type":"text","text":%q}]}]`, projection.OmittedImageText), mustJSON(t, get(out[8].(*record.Map), "content")))
}

func get(m *record.Map, k string) any {
	v, _ := m.Get(k)
	return v
}

func newGen(r *rand.Rand) *sessiongen.Gen {
	return sessiongen.New(r, sessiongen.Rules{Convert: projection.Convert, IsValidCompaction: projection.IsValidCompaction})
}

// pairs counts, by id, the calls and results of neutral messages, read
// here apart from the package.
func pairs(msgs []any) (calls, results map[string]int) {
	calls, results = map[string]int{}, map[string]int{}
	for _, v := range msgs {
		m, ok := v.(*record.Map)
		if !ok {
			continue
		}
		r, _ := m.String("role")
		switch r {
		case "assistant":
			arr, _ := get(m, "content").([]any)
			for _, x := range arr {
				if b, ok := x.(*record.Map); ok {
					switch t, _ := b.String("type"); t {
					case "toolCall", "tool_use", "tool_call":
						id, _ := b.String("id")
						calls[id]++
					}
				}
			}
			tc, _ := get(m, "tool_calls").([]any)
			for _, x := range tc {
				if b, ok := x.(*record.Map); ok {
					id, _ := b.String("id")
					calls[id]++
				}
			}
		case "toolResult", "tool":
			id, _ := m.String("toolCallId")
			if id == "" {
				id, _ = m.String("tool_call_id")
			}
			results[id]++
		case "user":
			arr, _ := get(m, "content").([]any)
			for _, x := range arr {
				if b, ok := x.(*record.Map); ok {
					if t, _ := b.String("type"); t == "tool_result" {
						id, _ := b.String("tool_use_id")
						results[id]++
					}
				}
			}
		}
	}
	return calls, results
}

// resultContents lists the content of every result, in order.
func resultContents(msgs []any) []string {
	var out []string
	for _, v := range msgs {
		m, ok := v.(*record.Map)
		if !ok {
			continue
		}
		switch r, _ := m.String("role"); r {
		case "toolResult", "tool":
			b, _ := record.MarshalJSON(get(m, "content"))
			out = append(out, string(b))
		case "user":
			arr, _ := get(m, "content").([]any)
			for _, x := range arr {
				if b, ok := x.(*record.Map); ok {
					if t, _ := b.String("type"); t == "tool_result" {
						j, _ := record.MarshalJSON(get(b, "content"))
						out = append(out, string(j))
					}
				}
			}
		}
	}
	return out
}

func generatedSession(seed uint64) ([]any, []uint64) {
	r := rand.New(rand.NewPCG(seed, 0x6564_6974))
	g := newGen(r)
	s := projection.New(projection.Options{BrowserTools: g.BrowserTools()})
	for i, v := range g.Session(20 + r.IntN(80)) {
		s.Apply(uint64(i+1), v)
	}
	return s.Messages(), s.MessageSeqs(nil)
}

// Over generated sessions, in every format: every call keeps its result,
// the most recent results are whole, the edit is the same each time, and
// the context ends at or under the trigger whenever clearing everything
// clearable would bring it there.
func TestApply_Generated(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 60
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		msgs, seqs := generatedSession(seed)
		r := rand.New(rand.NewPCG(seed, 1))
		for _, f := range render.Formats {
			opt := options(f, seqs)
			before := opt.Tokens(msgs)
			tr := &edits.ToolResults{
				TriggerTokens: uint64(r.IntN(before + 1)), HasTrigger: true,
				Keep: r.IntN(4), ClearAtLeastTokens: uint64(r.IntN(3) * 50),
				ClearInputs: r.IntN(2) == 0,
			}
			if r.IntN(3) == 0 {
				tr.ExcludeTools = []string{"bash"}
			}
			c := &edits.Config{ToolResults: tr, Thinking: &edits.Thinking{KeepTurns: r.IntN(3)}, Images: &edits.Images{Keep: r.IntN(3), Batch: 1 + r.IntN(3)}}
			what := fmt.Sprintf("seed %d %s %s", seed, f, mustJSON(t, c.Map()))
			out, outSeqs, rep := edits.Apply(msgs, c, opt)
			require.Len(t, outSeqs, len(out), what)
			require.Equal(t, before, rep.TokensBefore, what)
			require.Equal(t, opt.Tokens(out), rep.TokensAfter, what)

			again, _, _ := edits.Apply(msgs, c, opt)
			require.Equal(t, mustJSON(t, out), mustJSON(t, again), "%s: the same request, the same body", what)

			c0, r0 := pairs(msgs)
			c1, r1 := pairs(out)
			require.Equal(t, c0, c1, "%s: calls", what)
			require.Equal(t, r0, r1, "%s: results", what)

			was, is := resultContents(msgs), resultContents(out)
			require.Len(t, is, len(was), what)
			for i := max(len(was)-tr.Keep, 0); i < len(was); i++ {
				if !strings.Contains(was[i], `"image"`) { // images are the images edit's
					require.Equal(t, was[i], is[i], "%s: result %d of the last %d", what, i, tr.Keep)
				}
			}

			all := *tr
			all.TriggerTokens = 0
			_, _, most := edits.Apply(msgs, &edits.Config{ToolResults: &all, Thinking: c.Thinking, Images: c.Images}, opt)
			if uint64(most.TokensAfter) <= tr.TriggerTokens {
				require.LessOrEqual(t, uint64(rep.TokensAfter), tr.TriggerTokens, "%s: clearing all reaches the trigger", what)
			}
		}
	}
}

// As a session grows, a cleared result stays cleared while the estimate
// grows, and the cleared set changes only when the excess crosses a
// multiple of the step: between those points the body is the same up to
// the new tail.
func TestApply_Growth(t *testing.T) {
	const step = 2000
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 2))
		var msgs []any
		var seqs []uint64
		n := 0
		add := func(vs ...any) {
			for _, v := range vs {
				n++
				msgs = append(msgs, v)
				seqs = append(seqs, uint64(n))
			}
		}
		add(jsonValue(t, `{"role":"user","content":"go"}`))
		f := render.Formats[int(seed)%len(render.Formats)]
		opt := options(f, nil)
		c := &edits.Config{ToolResults: &edits.ToolResults{TriggerTokens: 5000, HasTrigger: true, Keep: 2, ClearAtLeastTokens: step}}
		var prevCleared map[uint64]bool
		var prevOut []any
		prevMultiple := uint64(0)
		prevAll := false
		for i := range 120 {
			size := 200 + r.IntN(3000)
			add(jsonValue(t, fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"step %d"},{"type":"toolCall","id":"c%d","name":"bash","arguments":{"n":%d}}]}`, i, i, i)),
				jsonValue(t, fmt.Sprintf(`{"role":"toolResult","toolCallId":"c%d","toolName":"bash","content":[{"type":"text","text":%q}]}`, i, strings.Repeat("z", size))))
			o := opt
			o.Seqs = seqs
			out, _, rep := edits.Apply(msgs, c, o)
			cleared := map[uint64]bool{}
			saved := 0
			for _, cl := range rep.Cleared {
				cleared[cl.Seq] = true
				saved += cl.Tokens
			}
			for s := range prevCleared {
				require.True(t, cleared[s], "seed %d %s step %d: the result of seq %d came back", seed, f, i, s)
			}
			multiple := uint64(0)
			if rep.TokensBefore > 5000 {
				multiple = (uint64(rep.TokensBefore) - 5000 + step - 1) / step
			}
			switch {
			case len(cleared) != len(prevCleared):
				if !prevAll {
					require.NotEqual(t, prevMultiple, multiple, "seed %d %s step %d: the cleared set changed within a step (%d cleared, %d saved, before %d)", seed, f, i, len(cleared), saved, rep.TokensBefore)
					if len(cleared) < i+1-2 { // not all clearable: they save the step's multiple
						require.GreaterOrEqual(t, saved, int(multiple*step), "seed %d %s step %d", seed, f, i)
					}
				}
			case prevOut != nil:
				// The same set: the body before the new messages is the same.
				require.True(t, mustJSON(t, prevOut) == mustJSON(t, out[:len(prevOut)]), "seed %d %s step %d: the body before the new messages changed", seed, f, i)
			}
			// Everything clearable was cleared short of the step: a newly
			// clearable result is cleared at once.
			prevAll = len(cleared) == max(i+1-2, 0)
			prevCleared, prevOut, prevMultiple = cleared, out, multiple
		}
		require.NotEmpty(t, prevCleared, "seed %d: the session went over the trigger", seed)
	}
}

// The same over generated sessions, record by record, in every format:
// while the results only grow at the tail and the estimate does not fall
// (a compaction, or a screenshot trimmed by pass 3, may make it fall), a
// cleared result stays cleared, and the cleared set changes only when
// the excess crosses a multiple of the step, or when everything
// clearable was cleared.
func TestApply_GrowthGenerated(t *testing.T) {
	n := 60
	if testing.Short() {
		n = 20
	}
	checked, changed := 0, 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r := rand.New(rand.NewPCG(seed, 4))
		g := newGen(r)
		s := projection.New(projection.Options{BrowserTools: g.BrowserTools()})
		f := render.Formats[int(seed)%len(render.Formats)]
		step := uint64(r.IntN(3) * 200)
		c := &edits.Config{ToolResults: &edits.ToolResults{TriggerTokens: uint64(300 + r.IntN(1500)), HasTrigger: true, Keep: r.IntN(3), ClearAtLeastTokens: step}}
		type key struct {
			seq uint64
			id  string
		}
		var prevResults []string
		var prevCleared map[key]bool
		prevBefore, prevMultiple, prevAll := 0, uint64(0), false
		for i, v := range g.Session(150) {
			s.Apply(uint64(i+1), v)
			msgs, seqs := s.Messages(), s.MessageSeqs(nil)
			opt := options(f, seqs)
			_, _, rep := edits.Apply(msgs, c, opt)
			results := resultKeys(msgs, seqs)
			cleared := map[key]bool{}
			for _, cl := range rep.Cleared {
				cleared[key{cl.Seq, cl.ID}] = true
			}
			multiple := uint64(0)
			if uint64(rep.TokensBefore) > c.ToolResults.TriggerTokens {
				q := max(step, 1)
				multiple = (uint64(rep.TokensBefore) - c.ToolResults.TriggerTokens + q - 1) / q
			}
			grew := rep.TokensBefore >= prevBefore && len(results) >= len(prevResults) && slicesEqual(results[:len(prevResults)], prevResults)
			if grew && prevCleared != nil {
				what := fmt.Sprintf("seed %d %s record %d", seed, f, i+1)
				for k := range prevCleared {
					require.True(t, cleared[k], "%s: the result %v came back", what, k)
				}
				if len(prevCleared) > 0 {
					checked++
				}
				if len(cleared) != len(prevCleared) {
					changed++
				}
				if len(cleared) != len(prevCleared) && !prevAll {
					require.NotEqual(t, prevMultiple, multiple, "%s: the cleared set changed within a step", what)
				}
			}
			all := edits.Config{ToolResults: &edits.ToolResults{HasTrigger: true, Keep: c.ToolResults.Keep}}
			_, _, most := edits.Apply(msgs, &all, opt)
			prevAll = len(most.Cleared) == len(rep.Cleared)
			prevResults, prevCleared, prevBefore, prevMultiple = results, cleared, rep.TokensBefore, multiple
		}
	}
	t.Logf("%d records checked with results cleared before, %d changes of the cleared set", checked, changed)
	require.Greater(t, checked, 100*n/60)
	require.Greater(t, changed, 20*n/60)
}

// resultKeys names each result of the context by its record and id.
func resultKeys(msgs []any, seqs []uint64) []string {
	var out []string
	for i, v := range msgs {
		m, ok := v.(*record.Map)
		if !ok {
			continue
		}
		switch r, _ := m.String("role"); r {
		case "toolResult", "tool":
			out = append(out, fmt.Sprintf("%d/%s", seqs[i], mustJSONValue(get(m, "content"))))
		case "user":
			arr, _ := get(m, "content").([]any)
			for _, x := range arr {
				if b, ok := x.(*record.Map); ok {
					if t, _ := b.String("type"); t == "tool_result" {
						out = append(out, fmt.Sprintf("%d/%s", seqs[i], mustJSONValue(get(b, "content"))))
					}
				}
			}
		}
	}
	return out
}

func mustJSONValue(v any) string {
	b, _ := record.MarshalJSON(v)
	return string(b)
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
