package render_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/spectest"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

var (
	update = flag.Bool("update", false, "rewrite the golden files of TestRender_Golden")
	genN   = flag.Int("gen.n", 10000, "generated sessions TestRender_Generated checks")
	propN  = flag.Int("prop.n", 2000, "generated sessions TestRender_PrefixStable checks")
)

var providers = render.Formats[1:]

// rendered is a body as the provider receives it: encoded, and decoded
// back.
func rendered(t testing.TB, f render.Format, msgs []any, opt render.Options) ([]byte, *record.Map, render.Report) {
	t.Helper()
	body, rep := render.Render(f, msgs, opt)
	b, err := body.AppendJSON(nil)
	require.NoError(t, err)
	v, err := record.DecodeJSON(b)
	require.NoError(t, err)
	return b, v.(*record.Map), rep
}

func requireValid(t testing.TB, f render.Format, body *record.Map, raw []byte, what string) {
	t.Helper()
	if vs := validate(f, body); len(vs) > 0 {
		t.Fatalf("%s: %s body breaks the provider's rules:\n%v\nbody: %.3000s", what, f, vs, raw)
	}
}

// TestRender_Golden renders the expected context of every spec fixture
// in every format and compares body and report with
// testdata/golden/<format>/<fixture file>; -update rewrites them.
func TestRender_Golden(t *testing.T) {
	byFile := map[string][]spectest.Case{}
	var files []string
	for _, c := range spectest.Cases(t) {
		if byFile[c.File] == nil {
			files = append(files, c.File)
		}
		byFile[c.File] = append(byFile[c.File], c)
	}
	for _, f := range providers {
		for _, file := range files {
			t.Run(string(f)+"/"+file, func(t *testing.T) {
				var out bytes.Buffer
				out.WriteString("[\n")
				for i, c := range byFile[file] {
					seqs := make([]uint64, len(c.Expect))
					for k := range seqs {
						seqs[k] = uint64(k + 1)
					}
					raw, body, rep := rendered(t, f, base64Images(c.Expect).([]any), render.Options{Seqs: seqs})
					requireValid(t, f, body, raw, c.Name)
					entry := record.NewMap("name", c.Name, "body", body, "render", rep.Map(f))
					b, err := record.MarshalJSON(entry)
					require.NoError(t, err)
					var ind bytes.Buffer
					require.NoError(t, json.Indent(&ind, b, "  ", "  "))
					if i > 0 {
						out.WriteString(",\n")
					}
					out.WriteString("  ")
					out.Write(ind.Bytes())
				}
				out.WriteString("\n]\n")
				path := filepath.Join("testdata", "golden", string(f), file)
				if *update {
					require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
					require.NoError(t, os.WriteFile(path, out.Bytes(), 0o644))
					return
				}
				want, err := os.ReadFile(path)
				require.NoError(t, err, "run go test ./pkg/render -run TestRender_Golden -update")
				require.Equal(t, string(want), out.String())
			})
		}
	}
}

// base64Images returns a copy of v whose image data is base64: the spec
// fixtures' images hold short placeholders ("u"), which no provider takes
// (the renderer removes them), and the golden files are there to show
// where each format places an image. Data already base64 is kept.
func base64Images(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = base64Images(e)
		}
		return out
	case *record.Map:
		typ, _ := x.String("type")
		out := record.NewMap()
		for _, m := range x.Members {
			val := m.Value
			if s, ok := val.(string); ok && m.Key == "data" && (typ == "image" || typ == "base64") && !isBase64(s) {
				val = base64.StdEncoding.EncodeToString([]byte(s))
			} else {
				val = base64Images(val)
			}
			out.Set(m.Key, val)
		}
		return out
	}
	return v
}

func isBase64(s string) bool {
	_, err := base64.StdEncoding.Strict().DecodeString(s)
	return err == nil && s != ""
}

// TestRender_Generated renders generated sessions of every record shape in
// every format: every body passes the validator, renders the same twice,
// loses nothing of the neutral context's text, calls and results but
// what the report lists, and invents nothing.
func TestRender_Generated(t *testing.T) {
	n := *genN
	if testing.Short() {
		n = 500
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		msgs, opt := generated(seed)
		for _, f := range providers {
			raw, body, rep := rendered(t, f, msgs, opt)
			what := fmt.Sprintf("seed %d", seed)
			requireValid(t, f, body, raw, what)
			again, _, _ := rendered(t, f, msgs, opt)
			require.Equal(t, string(raw), string(again), "%s: deterministic", what)
			if err := conserved(f, msgs, body, rep); err != nil {
				t.Fatalf("%s, %s: %v\nneutral: %.3000s\nbody: %.3000s", what, f, err, mustJSON(msgs), raw)
			}
		}
	}
}

// generated is the neutral context of a generated session.
func generated(seed uint64) ([]any, render.Options) {
	r := rand.New(rand.NewPCG(seed, 0x7265_6e64))
	g := newGen(r)
	popt := projection.Options{BrowserTools: g.BrowserTools()}
	recs := g.Session(5 + r.IntN(56))
	s := projection.New(popt)
	for i, v := range recs {
		s.Apply(uint64(i+1), v)
	}
	return s.Messages(), render.Options{Seqs: s.MessageSeqs(nil), BrowserTools: popt.BrowserTools}
}

func mustJSON(v any) []byte {
	b, _ := record.MarshalJSON(v)
	return b
}

// facts are what a context says, taken from the neutral messages or from
// a body by the test's own reading of each shape.
type facts struct {
	texts   []string
	calls   map[string][]string // id -> the names of its calls, in order
	results map[string]int      // id -> how many results
	images  int
	textAt  map[int][]string // neutral only: message -> its texts
}

func newFacts() *facts {
	return &facts{calls: map[string][]string{}, results: map[string]int{}, textAt: map[int][]string{}}
}

func (x *facts) text(i int, v any) {
	if s, ok := v.(string); ok && strings.TrimSpace(s) != "" {
		x.texts = append(x.texts, s)
		x.textAt[i] = append(x.textAt[i], s)
	}
}

// blocks reads text and image blocks of any shape.
func (x *facts) blocks(i int, content any) {
	switch c := content.(type) {
	case string:
		x.text(i, c)
	case []any:
		for _, e := range c {
			m := mapOf(e)
			switch str(m, "type") {
			case "text", "input_text", "output_text":
				x.text(i, field(m, "text"))
			case "image", "image_url", "input_image":
				x.images++
			}
		}
	}
}

func neutralFacts(msgs []any) *facts {
	x := newFacts()
	for i, v := range msgs {
		m := mapOf(v)
		switch str(m, "role") {
		case "system", "user":
			content := field(m, "content")
			x.blocks(i, content)
			arr, _ := arrOf(content)
			for _, e := range arr {
				if b := mapOf(e); str(b, "type") == "tool_result" {
					if id := str(b, "tool_use_id"); id != "" {
						x.results[id]++
					}
					x.blocks(i, field(b, "content"))
				}
			}
		case "assistant":
			content := field(m, "content")
			x.blocks(i, content)
			arr, _ := arrOf(content)
			for _, e := range arr {
				b := mapOf(e)
				switch str(b, "type") {
				case "toolCall", "tool_use", "tool_call":
					id := ""
					for _, k := range []string{"id", "toolCallId", "tool_call_id", "tool_call_id$"} {
						if s, ok := b.String(k); ok {
							id = s
							break
						}
					}
					x.calls[id] = append(x.calls[id], str(b, "name"))
				}
			}
			tc, _ := arrOf(field(m, "tool_calls"))
			for _, e := range tc {
				if b := mapOf(e); b != nil {
					x.calls[str(b, "id")] = append(x.calls[str(b, "id")], genToolName(b))
				}
			}
		case "toolResult", "tool":
			for _, k := range []string{"toolCallId", "tool_call_id", "tool_call_id$"} {
				if s, ok := m.String(k); ok {
					if s != "" {
						x.results[s]++
					}
					break
				}
			}
			x.blocks(i, field(m, "content"))
		}
	}
	return x
}

func bodyFacts(f render.Format, body *record.Map) *facts {
	x := newFacts()
	switch f {
	case render.Anthropic:
		sys, _ := arrOf(field(body, "system"))
		x.blocks(-1, sys)
		msgs, _ := arrOf(field(body, "messages"))
		for _, v := range msgs {
			content, _ := arrOf(field(mapOf(v), "content"))
			x.blocks(-1, content)
			for _, e := range content {
				b := mapOf(e)
				switch str(b, "type") {
				case "tool_use":
					x.calls[str(b, "id")] = append(x.calls[str(b, "id")], str(b, "name"))
				case "tool_result":
					x.results[str(b, "tool_use_id")]++
					x.blocks(-1, field(b, "content"))
				}
			}
		}
	case render.OpenAIChat:
		msgs, _ := arrOf(field(body, "messages"))
		for _, v := range msgs {
			m := mapOf(v)
			x.blocks(-1, field(m, "content"))
			if str(m, "role") == "tool" {
				x.results[str(m, "tool_call_id")]++
			}
			tc, _ := arrOf(field(m, "tool_calls"))
			for _, e := range tc {
				b := mapOf(e)
				x.calls[str(b, "id")] = append(x.calls[str(b, "id")], str(mapOf(field(b, "function")), "name"))
			}
		}
	case render.OpenAIResponses:
		items, _ := arrOf(field(body, "input"))
		for _, v := range items {
			m := mapOf(v)
			switch str(m, "type") {
			case "message":
				x.blocks(-1, field(m, "content"))
			case "function_call":
				x.calls[str(m, "call_id")] = append(x.calls[str(m, "call_id")], str(m, "name"))
			case "function_call_output":
				x.results[str(m, "call_id")]++
				x.blocks(-1, field(m, "output"))
			}
		}
	case render.Gemini:
		sys, _ := arrOf(field(mapOf(field(body, "systemInstruction")), "parts"))
		contents, _ := arrOf(field(body, "contents"))
		for _, v := range append([]any{record.NewMap("parts", sys)}, contents...) {
			parts, _ := arrOf(field(mapOf(v), "parts"))
			for _, e := range parts {
				p := mapOf(e)
				x.text(-1, field(p, "text"))
				if field(p, "inlineData") != nil {
					x.images++
				}
				if fc := mapOf(field(p, "functionCall")); fc != nil {
					x.calls[str(fc, "id")] = append(x.calls[str(fc, "id")], str(fc, "name"))
				}
				if fr := mapOf(field(p, "functionResponse")); fr != nil {
					x.results[str(fr, "id")]++
					resp := mapOf(field(fr, "response"))
					x.text(-1, field(resp, "output"))
					x.text(-1, field(resp, "error"))
				}
			}
		}
	}
	return x
}

// conserved checks that the body keeps the neutral context's text, calls
// and results, except what the report lists, and invents nothing.
func conserved(f render.Format, msgs []any, body *record.Map, rep render.Report) error {
	in, out := neutralFacts(msgs), bodyFacts(f, body)
	removedAt := map[int]bool{}
	removedCalls, removedResults := map[string]int{}, map[string]int{}
	toNeutral := map[string]string{} // a call's id as sent -> its neutral id
	renamedTo := map[string]bool{}
	for _, c := range rep.Changes {
		switch c.Kind {
		case render.BlockRemoved, render.MessageRemoved, render.DuplicateResult, render.ResultRemoved:
			removedAt[c.Message] = true
		}
		switch c.Kind {
		case render.CallRemoved:
			removedCalls[c.ID]++
		case render.DuplicateResult, render.ResultRemoved:
			removedResults[c.ID]++
		case render.IDRenamed:
			toNeutral[c.To] = c.ID
		case render.NameRenamed:
			renamedTo[c.To] = true
		}
	}
	neutralID := func(wire string) string {
		if id, ok := toNeutral[wire]; ok {
			return id
		}
		return wire
	}
	// Nothing lost but what is reported.
	sent := strings.Join(out.texts, "\x00")
	for i, texts := range in.textAt {
		for _, t := range texts {
			if !strings.Contains(sent, t) && !removedAt[i] {
				return fmt.Errorf("text of message %d lost without a report: %q", i, t)
			}
		}
	}
	gotCalls, gotResults := map[string]int{}, map[string]int{}
	for wire, names := range out.calls {
		id := neutralID(wire)
		gotCalls[id] += len(names)
		for _, n := range names {
			known := renamedTo[n]
			for _, m := range in.calls[id] {
				known = known || m == n
			}
			if !known {
				return fmt.Errorf("call %q (%q as sent) under a name it never had: %q", id, wire, n)
			}
		}
	}
	for wire, k := range out.results {
		gotResults[neutralID(wire)] += k
	}
	for id, names := range in.calls {
		if gotCalls[id]+removedCalls[id] != len(names) {
			return fmt.Errorf("calls with id %q: %d in the neutral context, %d sent, %d reported removed", id, len(names), gotCalls[id], removedCalls[id])
		}
	}
	for id, k := range in.results {
		if gotResults[id]+removedResults[id] != k {
			return fmt.Errorf("results with id %q: %d in the neutral context, %d sent, %d reported removed", id, k, gotResults[id], removedResults[id])
		}
	}
	// Nothing invented.
	for id := range gotCalls {
		if _, ok := in.calls[id]; !ok {
			return fmt.Errorf("a call with id %q that the neutral context does not have", id)
		}
	}
	for id := range gotResults {
		if in.results[id] == 0 {
			return fmt.Errorf("a result for id %q that the neutral context does not have", id)
		}
	}
	all := strings.Join(in.texts, "\n")
	for _, t := range out.texts {
		t = strings.TrimSuffix(strings.TrimPrefix(t, "<system>\n"), "\n</system>")
		if strings.HasPrefix(t, "Images from tool result ") || t == "[image in the next user message]" {
			continue
		}
		if !strings.Contains(all, t) {
			return fmt.Errorf("text the neutral context does not have: %q", t)
		}
	}
	if out.images > in.images {
		return fmt.Errorf("%d images sent, %d in the neutral context", out.images, in.images)
	}
	return nil
}

// TestRender_PrefixStable checks the cache property: a context that grows
// keeps the bytes of what came before. For every prefix of a generated
// context whose calls all have their results within it, the rendering of
// the prefix, less its closing brackets, begins the rendering of the
// whole context. (A call whose result is still to come is not sent, so
// the rendering changes from that call on once the result arrives.)
func TestRender_PrefixStable(t *testing.T) {
	n := *propN
	if testing.Short() {
		n = 200
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		msgs, opt := generated(seed)
		lead := 0
		for lead < len(msgs) && str(mapOf(msgs[lead]), "role") == "system" {
			lead++
		}
		for _, f := range providers {
			whole, _, _ := rendered(t, f, msgs, opt)
			for k := lead + 1; k < len(msgs); k++ {
				sub := opt
				sub.Seqs = opt.Seqs[:k]
				raw, _, rep := rendered(t, f, msgs[:k], sub)
				if waiting(rep) {
					continue
				}
				open := bytes.TrimRight(raw, "]}")
				if !bytes.HasPrefix(whole, open) {
					t.Fatalf("seed %d, %s: the rendering of the first %d messages is not kept:\nprefix: %.2000s\nwhole:  %.2000s", seed, f, k, open, whole)
				}
			}
		}
	}
}

// waiting reports whether a rendering left out a call for want of a
// result, which a later record may bring.
func waiting(rep render.Report) bool {
	for _, c := range rep.Changes {
		if c.Kind == render.CallRemoved && strings.HasSuffix(c.Reason, "no result") {
			return true
		}
	}
	return false
}

// FuzzRender renders any session in every format: no panic, every body
// passes the validator, and the session grown a record at a time renders
// from each state as Render renders it whole. The input is a generator seed and JSON lines
// of records interleaved with the generated ones.
func FuzzRender(f *testing.F) {
	for _, c := range spectest.Cases(f) {
		var b bytes.Buffer
		for _, r := range c.Records {
			b.Write(mustJSON(r))
			b.WriteByte('\n')
		}
		f.Add(uint64(0), b.Bytes())
	}
	f.Add(uint64(7), []byte(`{"role":"assistant","content":[{"type":"toolCall","id":"functions.bash:17","name":"bash","arguments":"not json"}]}`+"\n"+`{"role":"toolResult","toolCallId":"functions.bash:17","content":[{"type":"image","data":"AAAA","mimeType":"image/heic"}]}`))
	f.Fuzz(func(t *testing.T, seed uint64, data []byte) {
		var recs []any
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			if v, err := record.DecodeJSON(line); err == nil {
				recs = append(recs, v)
			}
		}
		popt := projection.Options{}
		if seed != 0 {
			r := rand.New(rand.NewPCG(seed, 1))
			g := newGen(r)
			popt = projection.Options{BrowserTools: g.BrowserTools()}
			gen := g.Session(int(seed % 41))
			mixed := make([]any, 0, len(recs)+len(gen))
			for len(recs)+len(gen) > 0 {
				if len(gen) == 0 || (len(recs) > 0 && r.IntN(2) == 0) {
					mixed, recs = append(mixed, recs[0]), recs[1:]
				} else {
					mixed, gen = append(mixed, gen[0]), gen[1:]
				}
			}
			recs = mixed
		}
		if len(recs) > 64 {
			recs = recs[:64]
		}
		res := projection.Build(projection.Numbered(recs), popt)
		for _, f := range providers {
			body, rep := render.Render(f, res.Messages, render.Options{BrowserTools: popt.BrowserTools})
			raw, err := body.AppendJSON(nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			v, err := record.DecodeJSON(raw)
			if err != nil {
				t.Fatalf("%s: the body does not decode: %v", f, err)
			}
			requireValid(t, f, v.(*record.Map), raw, "fuzz")
			if err := conserved(f, res.Messages, v.(*record.Map), rep); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		// Grown a record at a time, each version rendered from the state
		// of the one before is Render's.
		s := projection.New(popt)
		prev := map[render.Format]*render.State{}
		prevMsgpack := map[render.Format]*render.State{}
		for i, v := range recs {
			s.Apply(uint64(i+1), v)
			opt := render.Options{Seqs: s.MessageSeqs(nil), BrowserTools: popt.BrowserTools}
			for _, f := range providers {
				got, st, err := render.RenderJSON(nil, prev[f], f, s.Messages(), opt)
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				requireSameRendering(t, fmt.Sprintf("record %d", i+1), f, s.Messages(), opt, got, st)
				prev[f] = st
				got, st, err = render.RenderMsgpack(nil, prevMsgpack[f], f, s.Messages(), opt)
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				requireSameMsgpack(t, fmt.Sprintf("record %d, msgpack", i+1), f, s.Messages(), opt, got, st)
				prevMsgpack[f] = st
			}
		}
	})
}
