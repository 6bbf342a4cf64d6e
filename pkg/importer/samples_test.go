package importer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// sample is a transcript written by a tool (testdata/README.md).
type sample struct {
	path   string
	format Format
	read   func(*testing.T, string) source
	// unpaired is the number of calls the context reports as unanswered,
	// as the research on the samples counted them.
	unpaired int
}

var samples = []sample{
	{"claude-code/0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl", ClaudeCode, claudeSource, 0},
	{"claude-code/ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl", ClaudeCode, claudeSource, 0},
	{"claude-code/ef958aa1-0e93-49f0-bb71-150f63befcd1/subagents/agent-a36efb2a1231c41e2.jsonl", ClaudeCode, claudeSource, 0},
	{"claude-code/ef958aa1-0e93-49f0-bb71-150f63befcd1/subagents/agent-aef063ba534d73153.jsonl", ClaudeCode, claudeSource, 0},
	{"claude-code/full-session-two.jsonl", ClaudeCode, claudeSource, 0},
	{"claude-code/full-session-three.jsonl", ClaudeCode, claudeSource, 3},
	{"claude-code/dag_compact_after_rewind.jsonl", ClaudeCode, claudeSource, 0},
	{"codex/rollout-2025-09-24T20-12-23-01997ea4-a70d-7da3-8c20-c736db82a7c5.jsonl", Codex, codexSource, 0},
	{"codex/agent-sessions-codex-small.jsonl", Codex, codexSource, 0},
	{"pi/before-compaction.jsonl", Pi, piSource, 2},
	{"pi/session-01.jsonl", Pi, piSource, 0},
	{"pi/agent-sessions-pi-small.jsonl", Pi, piSource, 0},
	{"gemini/session-2025-10-27T19-55-981c87cb.json", Gemini, geminiSource, 0},
	{"gemini/session-2025-10-29T10-36-453aa339.json", Gemini, geminiSource, 0},
	{"gemini/agent-sessions-gemini-jsonl_v040.jsonl", Gemini, geminiSource, 0},
	{"openhands/software-agent-sdk-v1_49_4_mcp", OpenHands, openHandsSource, 0},
}

// parseSample imports a sample, through auto detection.
func parseSample(t testing.TB, path string) []*Transcript {
	t.Helper()
	full := filepath.Join("testdata", path)
	st, err := os.Stat(full)
	require.NoError(t, err)
	if st.IsDir() {
		ts, err := ParseFS(Auto, os.DirFS(full), full)
		require.NoError(t, err)
		return ts
	}
	f, err := os.Open(full)
	require.NoError(t, err)
	defer f.Close()
	ts, err := Parse(Auto, full, f)
	require.NoError(t, err)
	return ts
}

func values(tr *Transcript) []any {
	vs := make([]any, len(tr.Records))
	for i := range tr.Records {
		vs[i] = tr.Records[i].Value()
	}
	return vs
}

// held is what a list of messages holds, read with the record API.
type held struct {
	users           int
	calls, results  []string
	providerCalls   int
	images          []string
	unpaired, texts []string
}

func holdings(msgs []any) held {
	var h held
	for _, v := range msgs {
		m, ok := v.(*record.Map)
		if !ok || classOf(m) == "compaction" {
			continue
		}
		role, _ := m.String("role")
		content, _ := m.Get("content")
		switch role {
		case "user":
			if _, ok := content.(string); ok {
				h.users++
			}
			user := false
			for _, b := range arrOf(content) {
				if bm, ok := b.(*record.Map); ok && str(bm, "type") == "tool_result" {
					h.results = append(h.results, str(bm, "tool_use_id"))
				} else {
					user = true
				}
			}
			if user {
				h.users++
			}
		case "assistant":
			for _, b := range arrOf(content) {
				if bm, ok := b.(*record.Map); ok && (str(bm, "type") == "tool_use" || str(bm, "type") == "toolCall") {
					h.calls = append(h.calls, str(bm, "id"))
				}
			}
			for _, e := range arrAt(m, "tool_calls") {
				em, _ := e.(*record.Map)
				if record.IsTrue(get(em, "providerExecuted")) {
					h.providerCalls++
					continue
				}
				h.calls = append(h.calls, str(em, "id"))
			}
		case "toolResult":
			h.results = append(h.results, str(m, "toolCallId"))
		case "tool":
			h.results = append(h.results, str(m, "tool_call_id"))
		}
		collectImages(content, &h.images)
	}
	return h
}

func arrOf(v any) []any { a, _ := v.([]any); return a }

// collectImages gathers the base64 data of every image block under v,
// in pi's shape (data) or Anthropic's (source.data).
func collectImages(v any, out *[]string) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			collectImages(e, out)
		}
	case *record.Map:
		if str(x, "type") == "image" {
			if d, ok := x.String("data"); ok {
				*out = append(*out, d)
			} else {
				*out = append(*out, str(mapAt(x, "source"), "data"))
			}
			return
		}
		collectImages(get(x, "content"), out)
	}
}

// Every sample imports to records holding the source's active branch, and
// to a context in which what the source paired is paired, what it left
// unanswered is reported and nothing else is added, no text of an
// abandoned branch appears, and images keep their bytes.
func TestSamples(t *testing.T) {
	for _, smp := range samples {
		t.Run(smp.path, func(t *testing.T) {
			src := smp.read(t, filepath.Join("testdata", smp.path))
			ts := parseSample(t, smp.path)
			tr := ts[0]
			require.Equal(t, smp.format, tr.Format, "detected format")
			require.NoError(t, checkTranscript(tr))
			require.Empty(t, tr.Report.Unknown, "entries not understood")

			// The records: the source's active branch, counted.
			users, calls, results := src.count()
			got := holdings(values(tr))
			require.Equal(t, users, got.users, "user messages")
			require.Equal(t, calls, got.calls, "calls, in order")
			require.Equal(t, results, got.results, "results, in order")
			var images []string
			for _, it := range src.items {
				images = append(images, it.images...)
			}
			require.Equal(t, len(images), len(got.images), "images")
			for i := range images {
				require.True(t, images[i] == got.images[i], "image %d keeps its %d bytes of base64", i, len(images[i]))
			}

			// The context.
			res := projection.Build(projection.Numbered(values(tr)), projection.Options{})
			ctx := holdings(res.Messages)
			inCtx := func(ids []string) map[string]bool {
				m := map[string]bool{}
				for _, id := range ids {
					m[id] = true
				}
				return m
			}
			ctxCalls, ctxResults, srcResults := inCtx(ctx.calls), inCtx(ctx.results), inCtx(results)
			answered := map[string]bool{}
			window := src.window()
			for i, it := range window {
				for _, id := range it.calls {
					for _, later := range window[i:] {
						for _, r := range later.results {
							answered[id] = answered[id] || r == id
						}
					}
					if answered[id] {
						require.True(t, ctxCalls[id] && ctxResults[id], "call %s is paired in the source and in the context", id)
					} else if !srcResults[id] {
						require.False(t, ctxResults[id], "no result is invented for unanswered call %s", id)
					}
				}
			}
			for id := range ctxResults {
				require.True(t, srcResults[id], "result %s of the context is in the source", id)
			}
			require.Len(t, res.Dropped.UnpairedCalls, smp.unpaired, "unpaired calls: %v", res.Dropped.UnpairedCalls)
			for _, u := range res.Dropped.UnpairedCalls {
				require.False(t, srcResults[u.ID], "call %s reported unpaired has no result in the source", u.ID)
			}
			for _, it := range window {
				for _, img := range it.images {
					require.Contains(t, ctx.images, img, "an image after the last checkpoint is in the context")
				}
			}
			body, err := record.MarshalJSON(res.Messages)
			require.NoError(t, err)
			for _, text := range src.abandoned {
				require.NotContains(t, string(body), text[:min(len(text), 200)], "text of an abandoned branch")
			}
		})
	}
}

// The samples hold the cases the research counted on them.
func TestSamples_Shapes(t *testing.T) {
	t.Run("rewound branches are left out", func(t *testing.T) {
		src := claudeSource(t, "testdata/claude-code/dag_compact_after_rewind.jsonl")
		require.Equal(t, []string{"First attempt", "First answer"}, src.abandoned)
		tr := parseSample(t, "claude-code/dag_compact_after_rewind.jsonl")[0]
		require.Equal(t, 2, tr.Report.Abandoned)
		res := projection.Build(projection.Numbered(values(tr)), projection.Options{})
		require.Len(t, res.Messages, 3, "the summary, then the two messages after the compaction")
	})
	t.Run("slash commands sharing a parent keep the last", func(t *testing.T) {
		src := claudeSource(t, "testdata/claude-code/0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl")
		require.NotEmpty(t, src.abandoned)
		tr := parseSample(t, "claude-code/0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl")[0]
		require.Equal(t, 4, tr.Report.Abandoned, "/doctor and /status, each with its output")
	})
	t.Run("parallel calls recorded as chains are not rewinds", func(t *testing.T) {
		tr := parseSample(t, "claude-code/ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl")[0]
		require.Zero(t, tr.Report.Abandoned)
		h := holdings(values(tr))
		require.Len(t, h.calls, 40)
		require.Len(t, h.results, 40)
	})
	t.Run("a pasted image of a million bytes", func(t *testing.T) {
		tr := parseSample(t, "claude-code/0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl")[0]
		h := holdings(values(tr))
		require.Len(t, h.images, 1)
		require.Greater(t, len(h.images[0]), 1000000)
	})
	t.Run("subagent files are sessions of their own", func(t *testing.T) {
		tr := parseSample(t, "claude-code/ef958aa1-0e93-49f0-bb71-150f63befcd1/subagents/agent-a36efb2a1231c41e2.jsonl")[0]
		require.Equal(t, "ef958aa1-0e93-49f0-bb71-150f63befcd1_agent-a36efb2a1231c41e2", tr.Session)
		require.Equal(t, "a36efb2a1231c41e2", tr.Agent)
	})
	t.Run("codex developer messages become system messages", func(t *testing.T) {
		tr := parseSample(t, "codex/agent-sessions-codex-small.jsonl")[0]
		developer := 0
		for _, l := range readLines(t, "testdata/codex/agent-sessions-codex-small.jsonl") {
			if l["type"] == "response_item" && o(l["payload"])["role"] == "developer" {
				developer++
			}
		}
		require.Equal(t, 1, developer)
		require.Equal(t, 2, tr.Report.Records["system"], "the session's instructions and the developer message")
		require.Equal(t, 6, tr.Report.Records["compaction"])
	})
	t.Run("gemini calls and results split", func(t *testing.T) {
		tr := parseSample(t, "gemini/session-2025-10-27T19-55-981c87cb.json")[0]
		require.Equal(t, 13, tr.Report.Records["toolResult"])
	})
	t.Run("pi compactions by entry index", func(t *testing.T) {
		tr := parseSample(t, "pi/before-compaction.jsonl")[0]
		require.Equal(t, 2, tr.Report.Records["compaction"])
		res := projection.Build(projection.Numbered(values(tr)), projection.Options{})
		h := holdings(res.Messages)
		require.Len(t, h.calls, 192, "calls in the context, the 2 unanswered ones left out")
		require.Len(t, h.results, 192)
	})
	t.Run("an OpenHands agent error answers its call", func(t *testing.T) {
		tr := parseSample(t, "openhands/software-agent-sdk-v1_49_4_mcp")[0]
		require.Equal(t, 5, tr.Report.Records["tool"])
		res := projection.Build(projection.Numbered(values(tr)), projection.Options{})
		require.Empty(t, res.Dropped.UnpairedCalls)
	})
}

// Reading sparsely (a large content kept as checked bytes, decoded only on
// demand) converts every sample exactly as decoding every line whole does.
func TestSamples_SparseEqualsWhole(t *testing.T) {
	for _, smp := range samples {
		if smp.format != ClaudeCode && smp.format != Pi {
			continue
		}
		t.Run(smp.path, func(t *testing.T) {
			data := mustReadFile(t, filepath.Join("testdata", smp.path))
			requireSameConversion(t, data, smp.format)
		})
	}
}

func requireSameConversion(t testing.TB, data []byte, f Format) {
	t.Helper()
	sparse, err1 := parse(f, "f.jsonl", data, true)
	whole, err2 := parse(f, "f.jsonl", data, false)
	if err1 != nil || err2 != nil {
		require.Equal(t, err2, err1)
		return
	}
	require.Len(t, sparse, len(whole))
	for i := range whole {
		a, b := sparse[i], whole[i]
		require.Equal(t, b.Session, a.Session)
		require.Equal(t, b.Report, a.Report)
		require.Len(t, a.Records, len(b.Records))
		for k := range b.Records {
			ra, rb := &a.Records[k], &b.Records[k]
			require.Equal(t, rb.ID, ra.ID)
			require.Equal(t, rb.Where, ra.Where)
			require.Equal(t, rb.Class(), ra.Class())
			ja, err := ra.JSON()
			require.NoError(t, err)
			jb, err := rb.JSON()
			require.NoError(t, err)
			require.Equal(t, string(jb), string(ja), "record %s", rb.ID)
			require.True(t, record.Equal(rb.Value(), ra.Value()), "record %s", rb.ID)
		}
	}
}

// Lines that a scan could read differently from the decoder convert the
// same: keys spelled with escapes, repeated keys, a content elsewhere.
func TestSparseEqualsWhole_Tricky(t *testing.T) {
	pad := strings.Repeat("x", 300) // past scanMin: the lines are scanned
	lines := []string{
		`{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s","message":{"role":"user","content":"` + pad + `"}}`,
		`{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"s","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"p":"` + pad + `"}}]}}`,
		`{"type":"assistant","uuid":"a2","parentUuid":"a1","sessionId":"s","message":{"id":"m1","content":[{"type":"tool_use","id":"t2","name":"Bash","input":{}}]},"pad":"` + pad + `"}`,
		`{"type":"user","uuid":"r2","parentUuid":"a2","sessionId":"s","message":{"content":[{"\u0074ype":"tool_result","tool_use_id":"t2","content":"` + pad + `"}]}}`,
		`{"type":"user","uuid":"r1","parentUuid":"a1","sessionId":"s","message":{"content":[{"type":"tool_result","type":"tool_result","tool_use_id":"t1","content":"` + pad + `"}]}}`,
		`{"type":"user","uuid":"u2","parentUuid":"r1","sessionId":"s","message":{"content":"` + pad + `"},"message":{"role":"user","content":"last wins ` + pad + `"}}`,
		`{"typ\u0065":"user","uuid":"u3","parentUuid":"u2","sessionId":"s","message":{"content":"` + pad + `"}}`,
	}
	requireSameConversion(t, []byte(strings.Join(lines, "\n")), ClaudeCode)
	pi := []string{
		`{"type":"session","version":3,"id":"p"}`,
		`{"type":"message","id":"e1","parentId":null,"message":{"role":"user","content":"` + pad + `","timestamp":1}}`,
		`{"type":"message","id":"e2","parentId":"e1","message":{"role":"hookMessage","content":"` + pad + `"}}`,
		`{"type":"message","id":"e3","parentId":"e2","message":{"role":"assistant","content":[{"type":"text","text":"` + pad + `"}]},"message":{"role":"user","content":"` + pad + `"}}`,
	}
	requireSameConversion(t, []byte(strings.Join(pi, "\n")), Pi)
}
