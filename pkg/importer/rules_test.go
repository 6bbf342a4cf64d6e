package importer

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// rule is one mapping rule shown on a small hand-written file.
type rule struct {
	name string
	in   []string // the file's lines
	// want is every record, as JSON, in order; nil leaves it unchecked.
	want []string
	// ids, when set, are the records' ids.
	ids   []string
	check func(t *testing.T, ts []*Transcript)
}

func runRules(t *testing.T, f Format, rules []rule) {
	t.Helper()
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			ts, err := Parse(f, "t.jsonl", strings.NewReader(strings.Join(r.in, "\n")+"\n"))
			require.NoError(t, err)
			for _, tr := range ts {
				require.NoError(t, checkTranscript(tr))
			}
			tr := ts[0]
			if r.want != nil {
				requireRecords(t, r.want, tr)
			}
			if r.ids != nil {
				var ids []string
				for _, rec := range tr.Records {
					ids = append(ids, rec.ID)
				}
				require.Equal(t, r.ids, ids)
			}
			if r.check != nil {
				r.check(t, ts)
			}
		})
	}
}

func requireRecords(t *testing.T, want []string, tr *Transcript) {
	t.Helper()
	var got []string
	for _, rec := range tr.Records {
		b, err := record.MarshalJSON(rec.Value())
		require.NoError(t, err)
		got = append(got, string(b))
	}
	require.Len(t, got, len(want), "records:\n%s", strings.Join(got, "\n"))
	for i := range want {
		w, err := record.DecodeJSON([]byte(want[i]))
		require.NoError(t, err, want[i])
		require.True(t, record.Equal(w, tr.Records[i].Value()), "record %d:\nwant %s\n got %s", i, want[i], got[i])
	}
}

// buildContext builds the transcript's model context.
func buildContext(tr *Transcript) projection.Result {
	return projection.Build(projection.Numbered(values(tr)), projection.Options{})
}

func contextJSON(t *testing.T, tr *Transcript) string {
	t.Helper()
	b, err := record.MarshalJSON(buildContext(tr).Messages)
	require.NoError(t, err)
	return string(b)
}

func TestClaudeCode_Rules(t *testing.T) {
	user := func(uuid, parent, content string) string {
		p := `null`
		if parent != "" {
			p = `"` + parent + `"`
		}
		return `{"type":"user","uuid":"` + uuid + `","parentUuid":` + p + `,"sessionId":"s1","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":` + content + `}}`
	}
	asst := func(uuid, parent, msgID, content string) string {
		return `{"type":"assistant","uuid":"` + uuid + `","parentUuid":"` + parent + `","sessionId":"s1","timestamp":"2026-01-01T00:00:01Z","message":{"id":"` + msgID + `","model":"claude-x","role":"assistant","content":` + content + `}}`
	}
	toolUse := func(id string) string {
		return `[{"type":"tool_use","id":"` + id + `","name":"Bash","input":{"command":"ls"}}]`
	}
	toolResult := func(id string) string {
		return `[{"type":"tool_result","tool_use_id":"` + id + `","content":"ok"}]`
	}
	runRules(t, ClaudeCode, []rule{
		{
			name: "user and assistant lines pass through with their content",
			in:   []string{user("u1", "", `"hi"`), asst("a1", "u1", "m1", `[{"type":"text","text":"hello"}]`)},
			want: []string{
				`{"role":"user","content":"hi","timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"assistant","content":[{"type":"text","text":"hello"}],"responseId":"m1","model":"claude-x","timestamp":"2026-01-01T00:00:01Z"}`,
			},
			ids: []string{"u1", "a1"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, "s1", ts[0].Session)
				require.Equal(t, "s1", ts[0].Source)
			},
		},
		{
			name: "parallel calls written as a chain, each result off it, are all kept in file order",
			in: []string{
				user("u1", "", `"do two things"`),
				asst("a1", "u1", "m1", toolUse("t1")),
				asst("a2", "a1", "m1", toolUse("t2")),
				user("r2", "a2", toolResult("t2")),
				user("r1", "a1", toolResult("t1")),
				asst("a3", "r1", "m2", `[{"type":"text","text":"done"}]`),
			},
			ids: []string{"u1", "a1", "a2", "r2", "r1", "a3"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Zero(t, ts[0].Report.Abandoned)
				res := buildContext(ts[0])
				require.Empty(t, res.Dropped.UnpairedCalls)
				require.Empty(t, res.Dropped.OrphanResults)
				require.Len(t, res.Messages, 6)
			},
		},
		{
			name: "a rewind leaves the abandoned branch out",
			in: []string{
				user("u1", "", `"start"`),
				asst("a1", "u1", "m1", `[{"type":"text","text":"ready"}]`),
				user("b1u", "a1", `"first attempt"`),
				asst("b1a", "b1u", "m2", `[{"type":"text","text":"first answer"}]`),
				user("b2u", "a1", `"second attempt"`),
				asst("b2a", "b2u", "m3", `[{"type":"text","text":"second answer"}]`),
			},
			ids: []string{"u1", "a1", "b2u", "b2a"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, 2, ts[0].Report.Abandoned)
				require.NotContains(t, contextJSON(t, ts[0]), "first")
			},
		},
		{
			name: "a rewound call and its result leave with their branch",
			in: []string{
				user("u1", "", `"start"`),
				asst("a1", "u1", "m1", `[{"type":"text","text":"ready"}]`),
				user("b1u", "a1", `"delete the cache"`),
				asst("b1a", "b1u", "m2", toolUse("t1")),
				user("b1r", "b1a", toolResult("t1")),
				user("b2u", "a1", `"keep the cache"`),
			},
			ids: []string{"u1", "a1", "b2u"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, 3, ts[0].Report.Abandoned)
				res := buildContext(ts[0])
				require.Empty(t, res.Dropped.UnpairedCalls)
				require.NotContains(t, contextJSON(t, ts[0]), "t1")
			},
		},
		{
			name: "a result off the path that answers a call on it stays",
			in: []string{
				user("u1", "", `"start"`),
				asst("a1", "u1", "m1", toolUse("t1")),
				user("r1", "a1", toolResult("t1")),
				user("u2", "a1", `"and also"`),
			},
			ids: []string{"u1", "a1", "r1", "u2"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Empty(t, buildContext(ts[0]).Dropped.UnpairedCalls)
			},
		},
		{
			name: "a call whose result never came stays unanswered",
			in:   []string{user("u1", "", `"go"`), asst("a1", "u1", "m1", toolUse("t1"))},
			check: func(t *testing.T, ts []*Transcript) {
				res := buildContext(ts[0])
				require.Equal(t, []projection.UnpairedCall{{ID: "t1", Tool: "Bash", Seq: 2}}, res.Dropped.UnpairedCalls)
				require.Len(t, res.Messages, 1, "the call is left out, no result is made up")
			},
		},
		{
			name: "lines a resumed session copied are imported once",
			in: []string{
				user("u1", "", `"hi"`),
				strings.Replace(user("u1", "", `"hi"`), `"s1"`, `"s2"`, 1),
				asst("a1", "u1", "m1", `[{"type":"text","text":"hello"}]`),
			},
			ids: []string{"u1", "a1"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, 1, ts[0].Report.Metadata["duplicate uuid"])
			},
		},
		{
			name: "sidechain lines become a subagent's session",
			in: []string{
				user("u1", "", `"delegate"`),
				`{"type":"user","uuid":"x1","parentUuid":null,"isSidechain":true,"agentId":"ag1","sessionId":"s1","message":{"role":"user","content":"sub task"}}`,
				`{"type":"assistant","uuid":"x2","parentUuid":"x1","isSidechain":true,"agentId":"ag1","sessionId":"s1","message":{"id":"mx","role":"assistant","content":[{"type":"text","text":"sub done"}]}}`,
				asst("a1", "u1", "m1", `[{"type":"text","text":"delegated"}]`),
			},
			ids: []string{"u1", "a1"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Len(t, ts, 2)
				require.Equal(t, "s1_agent-ag1", ts[1].Session)
				require.Equal(t, "ag1", ts[1].Agent)
				require.Len(t, ts[1].Records, 2)
				require.NotContains(t, contextJSON(t, ts[0]), "sub")
			},
		},
		{
			name: "a compact boundary and its summary become one valid compaction",
			in: []string{
				user("u1", "", `"plan it"`),
				asst("a1", "u1", "m1", `[{"type":"text","text":"the plan"}]`),
				`{"type":"system","subtype":"compact_boundary","uuid":"cb","parentUuid":null,"logicalParentUuid":"a1","sessionId":"s1","timestamp":"2026-01-01T01:00:00Z","content":"Conversation compacted","compactMetadata":{"trigger":"auto","preTokens":1000,"preservedMessages":{"uuids":["a1"]}}}`,
				`{"type":"user","uuid":"cs","parentUuid":"cb","sessionId":"s1","isCompactSummary":true,"timestamp":"2026-01-01T01:00:01Z","message":{"role":"user","content":"Summary: a plan was made."}}`,
				user("u2", "cs", `"next"`),
			},
			ids: []string{"u1", "a1", "cb", "u2"},
			check: func(t *testing.T, ts []*Transcript) {
				c := ts[0].Records[2].Value()
				require.True(t, projection.IsValidCompaction(c))
				require.Equal(t, "Summary: a plan was made.", str(c, "summary"))
				require.Equal(t, "2026-01-01T01:00:00Z", str(c, "at"))
				n, _ := intAt(c, "tokensBefore")
				require.Equal(t, int64(1000), n)
				res := buildContext(ts[0])
				require.Len(t, res.Messages, 3)
				require.Equal(t, `[{"role":"user","content":"Summary: a plan was made.","timestamp":"2026-01-01T01:00:01Z"},{"role":"assistant","content":[{"type":"text","text":"the plan"}],"responseId":"m1","model":"claude-x","timestamp":"2026-01-01T00:00:01Z"},{"role":"user","content":"next","timestamp":"2026-01-01T00:00:00Z"}]`, contextJSON(t, ts[0]))
			},
		},
		{
			name: "a boundary whose summary is not written yet imports nothing",
			in: []string{
				user("u1", "", `"plan it"`),
				`{"type":"system","subtype":"compact_boundary","uuid":"cb","parentUuid":null,"logicalParentUuid":"u1","sessionId":"s1"}`,
			},
			ids: []string{"u1"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Len(t, ts[0].Report.Approximations, 1)
				require.Equal(t, "line 2", ts[0].Report.Approximations[0].Where)
			},
		},
		{
			name: "metadata lines are counted, lines not understood are reported with their line",
			in: []string{
				`{"type":"summary","summary":"A title","leafUuid":"u1"}`,
				user("u1", "", `"hi"`),
				`{"type":"mystery","x":1}`,
				`["not","an","object"]`,
				`{"type":"system","subtype":"turn_duration","uuid":"d1","parentUuid":"u1"}`,
				`{"type":"attachment","uuid":"h1","parentUuid":"d1","attachment":{"type":"hook_success"}}`,
			},
			ids: []string{"u1"},
			check: func(t *testing.T, ts []*Transcript) {
				rep := ts[0].Report
				require.Equal(t, map[string]int{"summary": 1, "system/turn_duration": 1, "attachment/hook_success": 1}, rep.Metadata)
				require.Len(t, rep.Unknown, 2)
				require.Equal(t, Note{"line 3", `type "mystery"`, 1}, rep.Unknown[0])
				require.Equal(t, "line 4", rep.Unknown[1].Where)
				require.Equal(t, 6, rep.Entries)
			},
		},
		{
			name: "context a hook added becomes an extension message",
			in: []string{
				user("u1", "", `"hi"`),
				`{"type":"attachment","uuid":"h1","parentUuid":"u1","timestamp":"2026-01-01T00:00:02Z","attachment":{"type":"hook_additional_context","content":["line one","line two"]}}`,
			},
			want: []string{
				`{"role":"user","content":"hi","timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"custom","customType":"claude-code/hook_additional_context","content":"line one\nline two","timestamp":"2026-01-01T00:00:02Z"}`,
			},
			check: func(t *testing.T, ts []*Transcript) {
				require.Contains(t, contextJSON(t, ts[0]), `{"role":"user","content":[{"type":"text","text":"line one\nline two"}]`)
			},
		},
		{
			name: "images keep their bytes",
			in:   []string{user("u1", "", `[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUg=="}},{"type":"text","text":"see"}]`)},
			want: []string{`{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgoAAAANSUhEUg=="}},{"type":"text","text":"see"}],"timestamp":"2026-01-01T00:00:00Z"}`},
		},
		{
			name: "a parent missing from the file starts the conversation, reported",
			in:   []string{user("u2", "gone", `"after a resume bug"`)},
			ids:  []string{"u2"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Len(t, ts[0].Report.Approximations, 1)
			},
		},
		{
			name: "lines without uuids are a plain sequence",
			in: []string{
				`{"type":"user","message":{"role":"user","content":"a"}}`,
				`{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"b"}]}}`,
			},
			ids: []string{"t:1", "t:2"},
		},
	})
}

func TestCodex_Rules(t *testing.T) {
	line := func(typ, payload string) string {
		return `{"timestamp":"2026-01-01T00:00:00Z","type":"` + typ + `","payload":` + payload + `}`
	}
	item := func(payload string) string { return line("response_item", payload) }
	meta := line("session_meta", `{"id":"sess-1","timestamp":"2026-01-01T00:00:00Z","instructions":null}`)
	runRules(t, Codex, []rule{
		{
			name: "messages: developer becomes system, text items text blocks, image data URLs image blocks",
			in: []string{
				line("session_meta", `{"id":"sess-1","instructions":"Be brief."}`),
				item(`{"type":"message","role":"developer","content":[{"type":"input_text","text":"sandbox rules"}]}`),
				item(`{"type":"message","role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]}`),
				item(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}`),
			},
			want: []string{
				`{"role":"system","content":[{"type":"text","text":"Be brief."}],"timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"system","content":[{"type":"text","text":"sandbox rules"}],"timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}],"timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"assistant","content":[{"type":"text","text":"ok"}],"timestamp":"2026-01-01T00:00:00Z"}`,
			},
			ids: []string{"sess-1:1", "sess-1:2", "sess-1:3", "sess-1:4"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, "sess-1", ts[0].Session)
			},
		},
		{
			name: "calls and their outputs link by call_id in OpenAI's shape",
			in: []string{
				meta,
				item(`{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"c1"}`),
				item(`{"type":"function_call_output","call_id":"c1","output":"a.txt"}`),
				item(`{"type":"custom_tool_call","call_id":"c2","name":"apply_patch","input":"*** Begin Patch"}`),
				item(`{"type":"custom_tool_call_output","call_id":"c2","output":[{"type":"input_text","text":"done"}]}`),
				item(`{"type":"local_shell_call","call_id":"c3","status":"completed","action":{"type":"exec","command":["pwd"]}}`),
				item(`{"type":"function_call_output","call_id":"c3","output":{"content":"/repo","success":true}}`),
			},
			want: []string{
				`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{\"command\":[\"ls\"]}"}}],"timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"tool","tool_call_id":"c1","content":"a.txt","timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"assistant","tool_calls":[{"id":"c2","type":"custom","custom":{"name":"apply_patch","input":"*** Begin Patch"}}],"timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"done"}],"timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"assistant","tool_calls":[{"id":"c3","type":"function","function":{"name":"local_shell","arguments":"{\"type\":\"exec\",\"command\":[\"pwd\"]}"}}],"timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"tool","tool_call_id":"c3","content":"/repo","timestamp":"2026-01-01T00:00:00Z"}`,
			},
			check: func(t *testing.T, ts []*Transcript) {
				res := buildContext(ts[0])
				require.Empty(t, res.Dropped.UnpairedCalls)
				require.Len(t, res.Messages, 6)
			},
		},
		{
			name: "a server-side web search is a provider-executed call with no result",
			in: []string{
				meta,
				item(`{"type":"web_search_call","id":"ws1","status":"completed","action":{"type":"search","query":"nats"}}`),
			},
			want: []string{
				`{"role":"assistant","tool_calls":[{"id":"ws1","type":"function","function":{"name":"web_search","arguments":"{\"type\":\"search\",\"query\":\"nats\"}"},"providerExecuted":true}],"timestamp":"2026-01-01T00:00:00Z"}`,
			},
		},
		{
			name: "reasoning, events and turn contexts are metadata; unknown lines are reported",
			in: []string{
				meta,
				item(`{"type":"reasoning","summary":[],"encrypted_content":"gAAA"}`),
				line("event_msg", `{"type":"token_count","info":null}`),
				line("turn_context", `{"model":"gpt-5"}`),
				line("brand_new", `{}`),
			},
			want: []string{},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, map[string]int{"session_meta": 1, "response_item/reasoning": 1, "event_msg/token_count": 1, "turn_context": 1}, ts[0].Report.Metadata)
				require.Equal(t, []Note{{"line 5", `type "brand_new"`, 1}}, ts[0].Report.Unknown)
			},
		},
		{
			name: "a compaction with its replacement history restarts the context on it",
			in: []string{
				meta,
				item(`{"type":"message","role":"user","content":[{"type":"input_text","text":"old question"}]}`),
				line("event_msg", `{"type":"token_count","info":{"last_token_usage":{"total_tokens":5000}}}`),
				line("compacted", `{"message":"they asked a question","replacement_history":[{"type":"message","role":"user","content":[{"type":"input_text","text":"kept question"}]},{"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]}]}`),
				item(`{"type":"message","role":"user","content":[{"type":"input_text","text":"new question"}]}`),
			},
			check: func(t *testing.T, ts []*Transcript) {
				c := ts[0].Records[1].Value()
				require.True(t, projection.IsValidCompaction(c))
				n, _ := intAt(c, "tokensBefore")
				require.Equal(t, int64(5000), n)
				require.Equal(t, `[{"role":"user","content":[{"type":"text","text":"kept question"}]},{"role":"system","content":[{"type":"text","text":"rules"}]},{"role":"user","content":[{"type":"text","text":"new question"}],"timestamp":"2026-01-01T00:00:00Z"}]`, contextJSON(t, ts[0]))
			},
		},
		{
			name: "a legacy compaction is rebuilt as Codex does, and reported as approximate",
			in: []string{
				meta,
				item(`{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd</environment_context>"}]}`),
				item(`{"type":"message","role":"user","content":[{"type":"input_text","text":"question"}]}`),
				item(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"answer"}]}`),
				line("compacted", `{"message":"asked and answered"}`),
			},
			check: func(t *testing.T, ts []*Transcript) {
				require.Len(t, ts[0].Report.Approximations, 1)
				got := contextJSON(t, ts[0])
				require.Contains(t, got, `"text":"<environment_context>cwd</environment_context>"`)
				require.Contains(t, got, `"text":"question"`)
				require.NotContains(t, got, `"answer"`)
				require.Contains(t, got, codexSummaryPrefix+`\nasked and answered`)
			},
		},
		{
			name: "a rollback drops the last turns",
			in: []string{
				meta,
				item(`{"type":"message","role":"user","content":[{"type":"input_text","text":"first"}]}`),
				line("event_msg", `{"type":"user_message","message":"first"}`),
				item(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"one"}]}`),
				item(`{"type":"message","role":"user","content":[{"type":"input_text","text":"second"}]}`),
				line("event_msg", `{"type":"user_message","message":"second"}`),
				item(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"two"}]}`),
				line("event_msg", `{"type":"thread_rolled_back","num_turns":1}`),
				item(`{"type":"message","role":"user","content":[{"type":"input_text","text":"third"}]}`),
			},
			ids: []string{"sess-1:2", "sess-1:4", "sess-1:9"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, 2, ts[0].Report.Abandoned)
			},
		},
		{
			name: "bare items of the oldest builds are understood",
			in: []string{
				`{"id":"old-1","timestamp":"2025-04-01T00:00:00Z","instructions":""}`,
				`{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}`,
			},
			want: []string{`{"role":"user","content":[{"type":"text","text":"hi"}]}`},
			ids:  []string{"old-1:2"},
		},
		{
			name: "a file without session meta is named after the file",
			in:   []string{item(`{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}`)},
			ids:  []string{"t:1"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, "t", ts[0].Session)
			},
		},
	})
}

func TestPi_Rules(t *testing.T) {
	header := `{"type":"session","version":3,"id":"p1","timestamp":"2026-01-01T00:00:00Z","cwd":"/repo"}`
	msg := func(id, parent, message string) string {
		p := `null`
		if parent != "" {
			p = `"` + parent + `"`
		}
		return `{"type":"message","id":"` + id + `","parentId":` + p + `,"timestamp":"2026-01-01T00:00:00Z","message":` + message + `}`
	}
	runRules(t, Pi, []rule{
		{
			name: "messages pass through as pi wrote them; metadata entries are kept as records",
			in: []string{
				header,
				`{"type":"model_change","id":"e1","parentId":null,"timestamp":"2026-01-01T00:00:00Z","provider":"anthropic","modelId":"m"}`,
				msg("e2", "e1", `{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":1}`),
				msg("e3", "e2", `{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a"}}],"stopReason":"toolUse","timestamp":2}`),
				msg("e4", "e3", `{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"image","data":"R0lGOD","mimeType":"image/gif"}],"isError":false,"timestamp":3}`),
			},
			want: []string{
				header,
				`{"type":"model_change","id":"e1","parentId":null,"timestamp":"2026-01-01T00:00:00Z","provider":"anthropic","modelId":"m"}`,
				`{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":1}`,
				`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a"}}],"stopReason":"toolUse","timestamp":2}`,
				`{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"image","data":"R0lGOD","mimeType":"image/gif"}],"isError":false,"timestamp":3}`,
			},
			ids: []string{"p1:header", "p1:e1", "p1:e2", "p1:e3", "p1:e4"},
		},
		{
			name: "only the branch of the last entry is imported",
			in: []string{
				header,
				msg("e1", "", `{"role":"user","content":"start","timestamp":1}`),
				msg("e2", "e1", `{"role":"user","content":"abandoned idea","timestamp":2}`),
				msg("e3", "e1", `{"role":"user","content":"kept idea","timestamp":3}`),
			},
			ids: []string{"p1:header", "p1:e1", "p1:e3"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, 1, ts[0].Report.Abandoned)
				require.NotContains(t, contextJSON(t, ts[0]), "abandoned")
			},
		},
		{
			name: "a branch summary becomes a user message with pi's wording",
			in: []string{
				header,
				`{"type":"branch_summary","id":"e1","parentId":null,"timestamp":"2026-01-01T00:00:01Z","fromId":"x","summary":"tried a cache"}`,
			},
			want: []string{header, `{"role":"user","content":[{"type":"text","text":"` + strings.ReplaceAll(piBranchPrefix, "\n", `\n`) + `tried a cache</summary>"}],"timestamp":1767225601000}`},
		},
		{
			name: "a version 2 hook message is an extension message",
			in: []string{
				`{"type":"session","version":2,"id":"p2","timestamp":"2026-01-01T00:00:00Z","cwd":"/"}`,
				msg("e1", "", `{"role":"hookMessage","customType":"h","content":"remember","display":true,"timestamp":1}`),
				`{"type":"custom_message","id":"e2","parentId":"e1","timestamp":"2026-01-01T00:00:00Z","customType":"x","content":"also","display":false}`,
			},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, "custom", str(ts[0].Records[1].Value(), "role"))
				require.Equal(t, `[{"role":"user","content":[{"type":"text","text":"remember"}],"timestamp":1},{"role":"user","content":[{"type":"text","text":"also"}],"timestamp":1767225600000}]`, contextJSON(t, ts[0]))
			},
		},
		{
			name: "a version 1 compaction keeps entries from its index, the header being 0",
			in: []string{
				`{"type":"session","id":"v1","timestamp":"2026-01-01T00:00:00Z","cwd":"/"}`,
				`{"type":"message","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"one","timestamp":1}}`,
				`{"type":"message","timestamp":"2026-01-01T00:00:00Z","message":{"role":"assistant","content":[{"type":"text","text":"two"}],"timestamp":2}}`,
				`{"type":"message","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"three","timestamp":3}}`,
				`{"type":"compaction","timestamp":"2026-01-01T00:00:04Z","summary":"S","firstKeptEntryIndex":3,"tokensBefore":99}`,
				`{"type":"message","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"five","timestamp":5}}`,
			},
			ids: []string{"v1:header", "v1:2", "v1:3", "v1:4", "v1:5", "v1:6"},
			check: func(t *testing.T, ts []*Transcript) {
				require.True(t, projection.IsValidCompaction(ts[0].Records[4].Value()))
				require.Equal(t, `[{"role":"user","content":[{"type":"text","text":"`+strings.ReplaceAll(piCompactionPrefix, "\n", `\n`)+`S\n</summary>"}],"timestamp":1767225604000},{"role":"user","content":"three","timestamp":3},{"role":"user","content":"five","timestamp":5}]`, contextJSON(t, ts[0]))
			},
		},
		{
			name: "a version 3 compaction keeps entries from its id on the branch",
			in: []string{
				header,
				msg("e1", "", `{"role":"user","content":"one","timestamp":1}`),
				msg("e2", "e1", `{"role":"user","content":"two","timestamp":2}`),
				`{"type":"compaction","id":"e3","parentId":"e2","timestamp":"2026-01-01T00:00:04Z","summary":"S","firstKeptEntryId":"e2","tokensBefore":9}`,
			},
			check: func(t *testing.T, ts []*Transcript) {
				got := contextJSON(t, ts[0])
				require.NotContains(t, got, `"one"`)
				require.Contains(t, got, `"two"`)
			},
		},
	})
	t.Run("a file without a session header is refused, naming the file", func(t *testing.T) {
		_, err := Parse(Pi, "x.jsonl", strings.NewReader(`{"type":"message","message":{"role":"user","content":"hi"}}`+"\n"))
		require.ErrorIs(t, err, ErrFormat)
		require.NoError(t, checkError("x.jsonl", err))
		require.Contains(t, err.Error(), "x.jsonl: line 1: ")
	})
}

func TestGemini_Rules(t *testing.T) {
	legacy := func(messages string) []string {
		return []string{`{"sessionId":"g1","projectHash":"h","startTime":"2026-01-01T00:00:00Z","messages":` + messages + `}`}
	}
	runRules(t, Gemini, []rule{
		{
			name: "a gemini message splits into the assistant's calls and one result per answered call",
			in: legacy(`[
				{"id":"m1","timestamp":"2026-01-01T00:00:00Z","type":"user","content":"fix it"},
				{"id":"m2","timestamp":"2026-01-01T00:00:01Z","type":"gemini","content":"Looking.","model":"gemini-x","toolCalls":[
					{"id":"c1","name":"read_file","args":{"path":"a"},"status":"success","timestamp":"2026-01-01T00:00:02Z","result":[{"functionResponse":{"id":"c1","name":"read_file","response":{"output":"text of a"}}}]},
					{"id":"c2","name":"run","args":{},"status":"error","result":[{"functionResponse":{"id":"c2","name":"run","response":{"error":"boom"}}}]},
					{"id":"c3","name":"run","args":{},"status":"cancelled"}
				]}
			]`),
			want: []string{
				`{"role":"user","content":"fix it","timestamp":"2026-01-01T00:00:00Z"}`,
				`{"role":"assistant","content":[{"type":"text","text":"Looking."},{"type":"toolCall","id":"c1","name":"read_file","arguments":{"path":"a"}},{"type":"toolCall","id":"c2","name":"run","arguments":{}},{"type":"toolCall","id":"c3","name":"run","arguments":{}}],"model":"gemini-x","timestamp":"2026-01-01T00:00:01Z"}`,
				`{"role":"toolResult","toolCallId":"c1","toolName":"read_file","content":[{"type":"text","text":"text of a"}],"isError":false,"timestamp":"2026-01-01T00:00:02Z"}`,
				`{"role":"toolResult","toolCallId":"c2","toolName":"run","content":[{"type":"text","text":"boom"}],"isError":true}`,
			},
			ids: []string{"g1:m1", "g1:m2", "g1:m2:c1", "g1:m2:c2"},
			check: func(t *testing.T, ts []*Transcript) {
				res := buildContext(ts[0])
				require.Equal(t, []projection.UnpairedCall{{ID: "c3", Tool: "run", Seq: 2}}, res.Dropped.UnpairedCalls)
			},
		},
		{
			name: "inline images become image blocks, thoughts thinking blocks, a structured response JSON text",
			in: legacy(`[
				{"id":"m1","type":"user","content":[{"text":"what is this"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}}]},
				{"id":"m2","type":"gemini","content":[{"text":"pondering","thought":true},{"text":"a logo"}],"toolCalls":[{"id":"c1","name":"ls","args":{},"status":"success","result":[{"functionResponse":{"id":"c1","name":"ls","response":{"files":["a"]}}}]}]},
				{"id":"m3","type":"info","content":"Logged in"}
			]`),
			want: []string{
				`{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}]}`,
				`{"role":"assistant","content":[{"type":"thinking","thinking":"pondering"},{"type":"text","text":"a logo"},{"type":"toolCall","id":"c1","name":"ls","arguments":{}}]}`,
				`{"role":"toolResult","toolCallId":"c1","toolName":"ls","content":[{"type":"text","text":"{\"files\":[\"a\"]}"}],"isError":false}`,
			},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, map[string]int{"info": 1}, ts[0].Report.Metadata)
			},
		},
		{
			name: "the log folds: a message written again counts once, in its place",
			in: []string{
				`{"sessionId":"g2","projectHash":"h","startTime":"2026-01-01T00:00:00Z"}`,
				`{"id":"u1","type":"user","content":"go"}`,
				`{"id":"a1","type":"gemini","content":"","toolCalls":[{"id":"c1","name":"ls","args":{},"status":"executing"}]}`,
				`{"$set":{"lastUpdated":"2026-01-01T00:00:01Z"}}`,
				`{"id":"a1","type":"gemini","content":"","toolCalls":[{"id":"c1","name":"ls","args":{},"status":"success","result":[{"functionResponse":{"id":"c1","name":"ls","response":{"output":"a"}}}]}]}`,
				`{"id":"a2","type":"gemini","content":"done"}`,
			},
			ids: []string{"g2:u1", "g2:a1", "g2:a1:c1", "g2:a2"},
		},
		{
			name: "a rewind removes its target and everything after",
			in: []string{
				`{"sessionId":"g3","projectHash":"h"}`,
				`{"id":"u1","type":"user","content":"first"}`,
				`{"id":"a1","type":"gemini","content":"reply"}`,
				`{"id":"u2","type":"user","content":"second"}`,
				`{"$rewindTo":"a1"}`,
				`{"id":"u3","type":"user","content":"again"}`,
			},
			ids: []string{"g3:u1", "g3:u3"},
			check: func(t *testing.T, ts []*Transcript) {
				require.Equal(t, 2, ts[0].Report.Abandoned)
			},
		},
		{
			name: "a replaced history is a compaction whose snapshot is the new list",
			in: []string{
				`{"sessionId":"g4","projectHash":"h"}`,
				`{"id":"u1","type":"user","content":"long story"}`,
				`{"id":"a1","type":"gemini","content":"long answer"}`,
				`{"$set":{"lastUpdated":"2026-01-01T00:00:09Z","messages":[{"id":"s1","type":"user","content":"summary of the story"},{"id":"a1","type":"gemini","content":"long answer"}]}}`,
				`{"id":"u2","type":"user","content":"next"}`,
			},
			ids: []string{"g4:u1", "g4:a1", "g4:set@4", "g4:u2"},
			check: func(t *testing.T, ts []*Transcript) {
				require.True(t, projection.IsValidCompaction(ts[0].Records[2].Value()))
				require.Equal(t, `[{"role":"user","content":"summary of the story"},{"role":"assistant","content":[{"type":"text","text":"long answer"}]},{"role":"user","content":"next"}]`, contextJSON(t, ts[0]))
			},
		},
	})
}

func TestOpenHands_Rules(t *testing.T) {
	dir := func(events ...string) fstest.MapFS {
		fsys := fstest.MapFS{}
		for i, e := range events {
			fsys["events/event-0000"+string(rune('0'+i))+"-x.json"] = &fstest.MapFile{Data: []byte(e)}
		}
		return fsys
	}
	parse := func(t *testing.T, fsys fstest.MapFS) *Transcript {
		t.Helper()
		ts, err := ParseFS(Auto, fsys, "conv-1")
		require.NoError(t, err)
		require.NoError(t, checkTranscript(ts[0]))
		return ts[0]
	}
	t.Run("events map to system, user, assistant calls and tool results", func(t *testing.T) {
		tr := parse(t, dir(
			`{"id":"e0","kind":"SystemPromptEvent","timestamp":"2026-01-01T00:00:00","system_prompt":{"type":"text","text":"You are an agent."},"tools":[]}`,
			`{"id":"e1","kind":"MessageEvent","parent_id":"e0","llm_message":{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","image_urls":["data:image/jpeg;base64,/9j/4AAQ"]}]},"extended_content":[{"type":"text","text":"skill notes"}]}`,
			`{"id":"e2","kind":"ActionEvent","parent_id":"e1","thought":[{"type":"text","text":"run it"}],"tool_call_id":"c1","tool_name":"terminal","tool_call":{"id":"c1","name":"terminal","arguments":"{\"command\":\"ls\"}"},"llm_response_id":"r1"}`,
			`{"id":"e3","kind":"ObservationEvent","parent_id":"e2","tool_call_id":"c1","tool_name":"terminal","observation":{"content":[{"type":"text","text":"a.txt"}],"is_error":false}}`,
			`{"id":"e4","kind":"ActionEvent","parent_id":"e3","tool_call_id":"c2","tool_name":"rm","tool_call":{"id":"c2","name":"rm","arguments":"{}"}}`,
			`{"id":"e5","kind":"UserRejectObservation","parent_id":"e4","tool_call_id":"c2","tool_name":"rm","rejection_reason":"no"}`,
			`{"id":"e6","kind":"ActionEvent","parent_id":"e5","tool_call_id":"c3","tool_name":"nope","tool_call":{"id":"c3","name":"nope","arguments":"{}"}}`,
			`{"id":"e7","kind":"AgentErrorEvent","parent_id":"e6","tool_call_id":"c3","tool_name":"nope","error":"Tool 'nope' not found."}`,
			`{"id":"e8","kind":"PauseEvent","parent_id":"e7"}`,
		))
		requireRecords(t, []string{
			`{"role":"system","content":[{"type":"text","text":"You are an agent."}],"timestamp":"2026-01-01T00:00:00"}`,
			`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","data":"/9j/4AAQ","mimeType":"image/jpeg"},{"type":"text","text":"skill notes"}]}`,
			`{"role":"assistant","content":[{"type":"text","text":"run it"}],"tool_calls":[{"id":"c1","type":"function","function":{"name":"terminal","arguments":"{\"command\":\"ls\"}"}}]}`,
			`{"role":"tool","tool_call_id":"c1","name":"terminal","content":[{"type":"text","text":"a.txt"}]}`,
			`{"role":"assistant","content":[],"tool_calls":[{"id":"c2","type":"function","function":{"name":"rm","arguments":"{}"}}]}`,
			`{"role":"tool","tool_call_id":"c2","name":"rm","content":[{"type":"text","text":"Action rejected: no"}]}`,
			`{"role":"assistant","content":[],"tool_calls":[{"id":"c3","type":"function","function":{"name":"nope","arguments":"{}"}}]}`,
			`{"role":"tool","tool_call_id":"c3","name":"nope","content":[{"type":"text","text":"Tool 'nope' not found."}]}`,
		}, tr)
		require.Equal(t, "conv-1", tr.Session)
		require.Equal(t, map[string]int{"PauseEvent": 1}, tr.Report.Metadata)
		require.Empty(t, buildContext(tr).Dropped.UnpairedCalls)
	})
	t.Run("a condensation forgets events and puts its summary at its offset", func(t *testing.T) {
		tr := parse(t, dir(
			`{"id":"e1","kind":"MessageEvent","llm_message":{"role":"user","content":[{"type":"text","text":"old ask"}]}}`,
			`{"id":"e2","kind":"ActionEvent","tool_call":{"id":"c1","name":"ls","arguments":"{}"}}`,
			`{"id":"e3","kind":"ObservationEvent","tool_call_id":"c1","tool_name":"ls","observation":{"content":[{"type":"text","text":"old output"}]}}`,
			`{"id":"e4","kind":"MessageEvent","llm_message":{"role":"user","content":[{"type":"text","text":"new ask"}]}}`,
			`{"id":"e5","kind":"Condensation","forgotten_event_ids":["e2","e3"],"summary":"listed files","summary_offset":1}`,
		))
		require.True(t, projection.IsValidCompaction(tr.Records[4].Value()))
		require.Equal(t, `[{"role":"user","content":[{"type":"text","text":"old ask"}]},{"role":"user","content":[{"type":"text","text":"listed files"}]},{"role":"user","content":[{"type":"text","text":"new ask"}]}]`, contextJSON(t, tr))
	})
	t.Run("events off the leaf's branch are left out", func(t *testing.T) {
		tr := parse(t, dir(
			`{"id":"e1","kind":"MessageEvent","llm_message":{"role":"user","content":[{"type":"text","text":"root"}]}}`,
			`{"id":"e2","kind":"MessageEvent","parent_id":"e1","llm_message":{"role":"user","content":[{"type":"text","text":"abandoned"}]}}`,
			`{"id":"e3","kind":"MessageEvent","parent_id":"e1","llm_message":{"role":"user","content":[{"type":"text","text":"kept"}]}}`,
		))
		require.Len(t, tr.Records, 2)
		require.Equal(t, 1, tr.Report.Abandoned)
	})
	t.Run("V0 events are reported, not guessed at", func(t *testing.T) {
		_, err := ParseFS(OpenHands, dir(`{"id":1,"action":"message","args":{"content":"hi"}}`), "old")
		require.ErrorIs(t, err, ErrFormat)
		require.Contains(t, err.Error(), "V0")
	})
	t.Run("a directory without events is refused", func(t *testing.T) {
		_, err := ParseFS(Auto, fstest.MapFS{"notes.txt": {Data: []byte("x")}}, "empty")
		require.Error(t, err)
		require.NoError(t, checkError("empty", err))
	})
	t.Run("an event file alone is refused with a hint", func(t *testing.T) {
		_, err := Parse(Auto, "event-00001-x.json", strings.NewReader("{\n \"kind\": \"MessageEvent\"\n}\n"))
		require.ErrorContains(t, err, "directory")
	})
}

func TestSessionID(t *testing.T) {
	require.Equal(t, "0d3a8e6f-290f-4105", SessionID("0d3a8e6f-290f-4105"))
	require.Equal(t, "a-b-c", SessionID("a.b c"))
	require.Equal(t, "-trimmed-for-fixture-", SessionID("[trimmed for fixture]"))
	require.Equal(t, "import", SessionID(""))
	long := SessionID(strings.Repeat("x", 200))
	require.Len(t, long, 128)
	require.NotEqual(t, long, SessionID(strings.Repeat("x", 199)), "long ids keep a hash of the whole")
	require.Equal(t, "s_agent-a1", AgentSession("s", "a1"))
	require.Equal(t, "s_agent-sidechain", AgentSession("s", ""))
}

func TestParseFormat(t *testing.T) {
	for _, f := range append(Formats, Auto) {
		got, err := ParseFormat(string(f))
		require.NoError(t, err)
		require.Equal(t, f, got)
	}
	_, err := ParseFormat("cursor")
	require.ErrorContains(t, err, "claude-code, codex, pi, gemini, openhands, auto")
}

func TestDetect(t *testing.T) {
	cases := map[string]Format{
		`{"type":"session","version":3,"id":"x"}`:                                                     Pi,
		`{"timestamp":"t","type":"session_meta","payload":{"id":"x"}}`:                                Codex,
		`{"type":"permission-mode","permissionMode":"default"}` + "\n" + `{"type":"user","uuid":"u"}`: ClaudeCode,
		`{"sessionId":"s","projectHash":"h","startTime":"t"}`:                                         Gemini,
		"{\n  \"sessionId\": \"s\",\n  \"messages\": []\n}\n":                                         Gemini,
	}
	for in, want := range cases {
		got, err := Detect([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := Detect([]byte(`{"hello":"world"}`))
	require.ErrorContains(t, err, "--from")
	_, err = Detect([]byte("plain text"))
	require.ErrorContains(t, err, "--from")
}

// A file in which nothing is understood is refused with an error naming
// it; the wrong --from says so.
func TestParse_WrongFormat(t *testing.T) {
	data := mustReadFile(t, "testdata/pi/session-01.jsonl")
	for _, f := range []Format{ClaudeCode, Codex, Gemini} {
		_, err := Parse(f, "session-01.jsonl", strings.NewReader(string(data)))
		require.True(t, errors.Is(err, ErrFormat), "%s: %v", f, err)
		require.NoError(t, checkError("session-01.jsonl", err))
	}
}

// Gemini CLI writes its last model message again whole as its calls,
// results and tokens come: its records are the transcript's unsettled
// ones, until a user message follows it (an info line does not), or the
// history is replaced.
func TestGemini_Unsettled(t *testing.T) {
	const meta = `{"sessionId":"u","projectHash":"h","startTime":"2026-01-01T00:00:00Z"}`
	user := func(id string) string { return `{"id":"` + id + `","type":"user","content":"hi"}` }
	model := func(id string) string {
		return `{"id":"` + id + `","type":"gemini","content":"ok","toolCalls":[{"id":"c` + id + `","name":"ls","args":{},"status":"success","result":[{"functionResponse":{"id":"c` + id + `","name":"ls","response":{"output":"a"}}}]}]}`
	}
	info := `{"id":"i1","type":"info","content":"Logged in"}`
	set := `{"$set":{"messages":[` + user("u1") + `,` + model("g1") + `]}}`
	for _, c := range []struct {
		name  string
		lines []string
		want  int
	}{
		{"a model message last: it and its result", []string{meta, user("u1"), model("g1")}, 2},
		{"written again: its last version's", []string{meta, user("u1"), model("g1"), model("g1")}, 2},
		{"a user message last", []string{meta, user("u1"), model("g1"), user("u2")}, 0},
		{"an info line after the model message", []string{meta, user("u1"), model("g1"), info}, 2},
		{"the history replaced last", []string{meta, user("u1"), model("g1"), set}, 0},
		{"no message", []string{meta}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts, err := Parse(Gemini, "t.jsonl", strings.NewReader(strings.Join(c.lines, "\n")+"\n"))
			require.NoError(t, err)
			require.Len(t, ts, 1)
			require.Equal(t, c.want, ts[0].Unsettled)
			require.LessOrEqual(t, ts[0].Unsettled, len(ts[0].Records))
		})
	}
}
