package projection

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/require"
)

// ruleCase is one case of the context rules, written as JSON the way
// CONTEXT.md writes them: records in, messages out.
type ruleCase struct {
	name    string
	opt     Options
	records string // a JSON array of records; the n-th has stream sequence n
	expect  string // a JSON array of the expected messages
	// dropped is the expected report as JSON (lists left out are empty);
	// "" leaves the report unchecked.
	dropped string
	// exact also requires the messages to encode to expect's JSON byte for
	// byte, so expect must list members in the order they come out.
	exact bool
	// jsonOnly marks messages holding a number msgpack cannot carry: the
	// msgpack renderings are not compared.
	jsonOnly bool
}

// runRuleCases runs every case through Build and through a Session fed
// one record at a time, which must agree with Build after every record.
func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			records := decodeArray(t, c.records)
			expect := decodeArray(t, c.expect)
			var dropped *Dropped
			if c.dropped != "" {
				dropped = decodeDropped(t, c.dropped)
			}
			requireRules(t, c.opt, records, expect, dropped, c.jsonOnly)
			if c.exact {
				want, err := record.MarshalJSON(expect)
				require.NoError(t, err)
				got, err := record.MarshalJSON(Build(Numbered(records), c.opt).Messages)
				require.NoError(t, err)
				require.Equal(t, string(want), string(got))
			}
		})
	}
}

// requireRules checks Build against the expected messages and report, and
// a Session against Build after every prefix of the records.
func requireRules(t *testing.T, opt Options, records, expect []any, dropped *Dropped, jsonOnly bool) {
	t.Helper()
	stored, err := record.MarshalJSON(records)
	require.NoError(t, err)
	got := Build(Numbered(records), opt)
	require.NotNil(t, got.Messages)
	require.NotNil(t, got.Dropped.UnpairedCalls)
	require.NotNil(t, got.Dropped.OrphanResults)
	requireMessages(t, expect, got.Messages, "Build")
	if dropped != nil {
		require.Equal(t, *dropped, got.Dropped, "Build report")
	}

	s := New(opt)
	require.NotNil(t, s.Messages())
	// What a session hands out must not change under later records.
	var heldMsgs [][]any
	var heldJSON [][]byte
	for i, r := range records {
		s.Apply(uint64(i+1), r)
		want := Build(Numbered(records[:i+1]), opt)
		if jsonOnly {
			requireSameJSONResult(t, want, s)
		} else {
			requireSameResult(t, want, s)
		}
		body, _ := s.JSONBody()
		heldMsgs, heldJSON = append(heldMsgs, s.Messages()), append(heldJSON, body)
	}
	requireMessages(t, expect, s.Messages(), "Session")
	for i := range heldMsgs {
		want := Build(Numbered(records[:i+1]), opt).Messages
		requireMessages(t, want, heldMsgs[i], "messages handed out after record", i+1)
		wantJSON, err := record.MarshalJSON(want)
		require.NoError(t, err)
		require.Equal(t, string(wantJSON), "["+string(heldJSON[i])+"]", "JSON handed out after record %d", i+1)
	}
	// The passes build a view: the stored records keep every field and image.
	after, err := record.MarshalJSON(records)
	require.NoError(t, err)
	require.Equal(t, string(stored), string(after), "the records were modified")
}

// requireSameJSONResult is requireSameResult without the msgpack
// rendering, for numbers msgpack cannot carry.
func requireSameJSONResult(t testing.TB, want Result, s *Session) {
	t.Helper()
	requireMessages(t, want.Messages, s.Messages())
	require.Equal(t, want.Dropped, s.Dropped())
	wantJSON, err := record.MarshalJSON(want.Messages)
	require.NoError(t, err)
	require.Equal(t, string(wantJSON), string(s.AppendJSON(nil)))
	_, err = record.MarshalMsgpack(want.Messages)
	require.Error(t, err, "the case says msgpack cannot carry these messages")
}

func decodeArray(t *testing.T, text string) []any {
	t.Helper()
	v, err := record.DecodeJSON([]byte(text))
	require.NoError(t, err, text)
	arr, ok := v.([]any)
	require.True(t, ok, "not a JSON array: %s", text)
	return arr
}

func decodeDropped(t *testing.T, text string) *Dropped {
	t.Helper()
	var d Dropped
	require.NoError(t, json.Unmarshal([]byte(text), &d), text)
	if d.UnpairedCalls == nil {
		d.UnpairedCalls = []UnpairedCall{}
	}
	if d.OrphanResults == nil {
		d.OrphanResults = []OrphanResult{}
	}
	return &d
}

// checkpoint returns a valid compaction record as JSON with the given
// snapshot messages. Extra members are appended; one that repeats a key
// replaces its value, as the JSON decoder keeps the last value.
func checkpoint(messages string, extra ...string) string {
	var b strings.Builder
	b.WriteString(`{"type":"compaction","at":"2026-08-05T00:00:00.000Z","baseSeq":2,"plannerVersion":2,` +
		`"summaryModelRef":"test/model","summary":"s","qualityAudit":"passed","messages":`)
	b.WriteString(messages)
	b.WriteString(`,"firstKeptIndex":1,"tokensBefore":100,"tokensAfter":10`)
	for _, e := range extra {
		b.WriteString(",")
		b.WriteString(e)
	}
	b.WriteString("}")
	return b.String()
}

// shell returns the content of a converted shell message holding text.
func shell(text string) string {
	b, _ := json.Marshal(text)
	return `[{"type":"text","text":` + string(b) + `}]`
}

const omitted = `{"type":"text","text":"[Earlier image omitted from the model context.]"}`

func TestBuild_Pass1Rules(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			name: "an invalid compaction with role user passes through under rule 5",
			records: `[{"role":"user","content":"a"},` +
				checkpoint(`[{"role":"user","content":"SNAP"}]`, `"qualityAudit":"failed"`, `"role":"user"`, `"content":"c"`) + `]`,
			expect: `[{"role":"user","content":"a"},` +
				checkpoint(`[{"role":"user","content":"SNAP"}]`, `"qualityAudit":"failed"`, `"role":"user"`, `"content":"c"`) + `]`,
		},
		{
			name:    "a label record with role user passes through under rule 5",
			records: `[{"type":"label","role":"user","content":"l","label":"v1","targetId":"m3"}]`,
			expect:  `[{"type":"label","role":"user","content":"l","label":"v1","targetId":"m3"}]`,
		},
		{
			name: "rule 6 record types that also have a pass-through role pass through",
			records: `[{"type":"model_change","role":"system","content":"m","model":"x"},
				{"type":"thinking_level_change","role":"user","content":"t"},
				{"type":"session_info","role":"assistant","content":"i"},
				{"type":"custom","role":"user","content":"state","customType":"k"}]`,
			expect: `[{"type":"model_change","role":"system","content":"m","model":"x"},
				{"type":"thinking_level_change","role":"user","content":"t"},
				{"type":"session_info","role":"assistant","content":"i"},
				{"type":"custom","role":"user","content":"state","customType":"k"}]`,
		},
		{
			name: "rule 6 records without a pass-through role are dropped",
			records: `[{"type":"compaction","summary":"legacy","messages":[{"role":"user","content":"S"}]},
				{"type":"label","label":"v1","content":"l"},
				{"type":"model_change","model":"m"},
				{"type":"thinking_level_change","level":"high"},
				{"type":"session_info","name":"n"},
				{"type":"custom","customType":"x","data":{"content":"y"}},
				{"role":"compactionSummary","summary":"s","content":"c"},
				{"role":"branchSummary","summary":"b","content":"c"},
				{"type":"label","role":"label","content":"l"}]`,
			expect: `[]`,
		},
		{
			name: "a valid compaction wins over kind context and over a pass-through role",
			records: `[{"role":"user","content":"a"},` +
				checkpoint(`[{"role":"user","content":"S"}]`, `"kind":"context"`, `"role":"user"`, `"content":"c"`) + `]`,
			expect: `[{"role":"user","content":"S"}]`,
		},
		{
			name: "kind context wins over shell runs, extension messages and pass-through roles",
			records: `[{"kind":"context","type":"custom_message","content":"x"},
				{"kind":"context","role":"custom","content":"y"},
				{"kind":"context","role":"assistant","content":"z"},
				{"kind":"context","role":"toolResult","toolCallId":"c"}]`,
			expect: `[]`,
		},
		{
			name: "only kind equal to the string context drops a record",
			records: `[{"kind":"message","role":"user","content":"a"},
				{"kind":["context"],"role":"user","content":"b"},
				{"kind":"Context","role":"user","content":"c"},
				{"kind":null,"role":"user","content":"d"}]`,
			expect: `[{"kind":"message","role":"user","content":"a"},
				{"kind":["context"],"role":"user","content":"b"},
				{"kind":"Context","role":"user","content":"c"},
				{"kind":null,"role":"user","content":"d"}]`,
		},
		{
			name: "role custom or type custom_message wins over rule 5 and rule 6",
			records: `[{"role":"custom","type":"label","content":"a"},
				{"type":"custom_message","role":"user","content":"b"},
				{"type":"custom_message","role":"toolResult","toolCallId":"c","content":"c"},
				{"type":"custom_message","content":"d"}]`,
			expect: `[{"role":"user","content":[{"type":"text","text":"a"}]},
				{"role":"user","content":[{"type":"text","text":"b"}]},
				{"role":"user","content":[{"type":"text","text":"c"}]},
				{"role":"user","content":[{"type":"text","text":"d"}]}]`,
		},
		{
			name: "roles and types match exactly",
			records: `[{"role":"User","content":"a"},
				{"role":"ASSISTANT","content":"b"},
				{"role":"tool_result","toolCallId":"c"},
				{"role":"bash_execution","command":"ls"},
				{"role":"Custom","content":"d"},
				{"type":"Custom_Message","content":"e"},
				{"role":["user"],"content":"f"},
				{"role":null,"content":"g"},
				{"role":"","content":"h"},
				{"role":" user","content":"i"}]`,
			expect: `[]`,
		},
		{
			name: "an extension message copies only role, content and timestamp",
			records: `[{"role":"custom","customType":"note","display":false,"details":{"a":1},
				"content":"n","timestamp":7,"id":"e1","extra":"x"}]`,
			expect: `[{"role":"user","content":[{"type":"text","text":"n"}],"timestamp":7}]`,
		},
		{
			name: "extension content: an array is kept as it is, any other non-string gives an empty text",
			records: `[{"role":"custom","content":[]},
				{"role":"custom","content":["raw",5,null,{"type":"image","data":"I"}]},
				{"role":"custom","content":{"type":"text","text":"m"}},
				{"role":"custom","content":null},
				{"role":"custom","content":0},
				{"role":"custom","content":true},
				{"role":"custom"},
				{"role":"custom","content":""}]`,
			expect: `[{"role":"user","content":[]},
				{"role":"user","content":["raw",5,null,{"type":"image","data":"I"}]},
				{"role":"user","content":[{"type":"text","text":""}]},
				{"role":"user","content":[{"type":"text","text":""}]},
				{"role":"user","content":[{"type":"text","text":""}]},
				{"role":"user","content":[{"type":"text","text":""}]},
				{"role":"user","content":[{"type":"text","text":""}]},
				{"role":"user","content":[{"type":"text","text":""}]}]`,
		},
		{
			name: "a message that passes through keeps its timestamp untouched, whatever it holds",
			records: `[{"role":"user","content":"a","timestamp":"yesterday"},
				{"role":"assistant","content":"b","timestamp":"2024-01-01t00:00:00z"},
				{"role":"system","content":"c","timestamp":1.5e3},
				{"role":"user","content":"d","timestamp":null}]`,
			expect: `[{"role":"user","content":"a","timestamp":"yesterday"},
				{"role":"assistant","content":"b","timestamp":"2024-01-01t00:00:00z"},
				{"role":"system","content":"c","timestamp":1.5e3},
				{"role":"user","content":"d","timestamp":null}]`,
			exact: true,
		},
	})
}

func TestBuild_Shell(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			name: "an exit code that is an integer is written in decimal",
			records: `[{"role":"bashExecution","command":"x","output":"o","exitCode":3.0},
				{"role":"bashExecution","command":"x","output":"o","exitCode":1E1},
				{"role":"bashExecution","command":"x","output":"o","exitCode":-1},
				{"role":"bashExecution","command":"x","output":"o","exitCode":9223372036854775807},
				{"role":"bashExecution","command":"x","output":"o","exitCode":18446744073709551617},
				{"role":"bashExecution","command":"x","output":"o","exitCode":2.50e1},
				{"role":"bashExecution","command":"x","output":"o","exitCode":1200e-2},
				{"role":"bashExecution","command":"x","output":"o","exitCode":-0.0},
				{"role":"bashExecution","command":"x","output":"o","exitCode":-2E+0}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=3\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=10\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=-1\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=9223372036854775807\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=18446744073709551617\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=25\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=12\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=-2\noutput:\no\n</local_shell>") + `}]`,
		},
		{
			name: "an exit code of any other value gives ?",
			records: `[{"role":"bashExecution","command":"x","output":"o","exitCode":"3"},
				{"role":"bashExecution","command":"x","output":"o","exitCode":true},
				{"role":"bashExecution","command":"x","output":"o","exitCode":1.5},
				{"role":"bashExecution","command":"x","output":"o","exitCode":-0.5},
				{"role":"bashExecution","command":"x","output":"o","exitCode":1e-1},
				{"role":"bashExecution","command":"x","output":"o","exitCode":[0]},
				{"role":"bashExecution","command":"x","output":"o","exitCode":{"code":0}}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=?\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=?\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=?\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=?\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=?\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=?\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=?\noutput:\no\n</local_shell>") + `}]`,
		},
		{
			name: "signal is written only when it is a non-empty string",
			records: `[{"role":"bashExecution","command":"x","output":"o","exitCode":1,"signal":9},
				{"role":"bashExecution","command":"x","output":"o","exitCode":1,"signal":true},
				{"role":"bashExecution","command":"x","output":"o","exitCode":1,"signal":["SIGTERM"]},
				{"role":"bashExecution","command":"x","output":"o","exitCode":1,"signal":{"name":"SIGTERM"}},
				{"role":"bashExecution","command":"x","output":"o","exitCode":130,"signal":"SIGINT"},
				{"role":"bashExecution","command":"x","output":"o","signal":" "}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=1\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=1\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=1\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=1\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=130 signal=SIGINT\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=? signal= \noutput:\no\n</local_shell>") + `}]`,
		},
		{
			name: "truncated marks the output only when it is true",
			records: `[{"role":"bashExecution","command":"x","output":"o","exitCode":0,"truncated":"true"},
				{"role":"bashExecution","command":"x","output":"o","exitCode":0,"truncated":1},
				{"role":"bashExecution","command":"x","output":"o","exitCode":0,"truncated":null},
				{"role":"bashExecution","command":"x","output":"o\n","exitCode":0,"truncated":true}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\no\n\n[output truncated]</local_shell>") + `}]`,
		},
		{
			name: "only the boolean true excludes a run",
			records: `[{"role":"bashExecution","command":"a","output":"","exitCode":0,"excludeFromContext":"true"},
				{"role":"bashExecution","command":"b","output":"","exitCode":0,"excludedFromContext":1},
				{"role":"bashExecution","command":"c","output":"","exitCode":0,"excludeFromContext":null},
				{"role":"bashExecution","command":"d","output":"","exitCode":0,"excludeFromContext":false,"excludedFromContext":true},
				{"role":"bashExecution","command":"e","output":"","exitCode":0,"excludeFromContext":true,"excludedFromContext":false}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ a\nexit=0\noutput: (empty)\n\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ b\nexit=0\noutput: (empty)\n\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ c\nexit=0\noutput: (empty)\n\n</local_shell>") + `}]`,
		},
		{
			name: "a command that is not a string drops the run",
			records: `[{"role":"bashExecution","command":42,"output":"o","exitCode":0},
				{"role":"bashExecution","command":["ls"],"output":"o","exitCode":0},
				{"role":"bashExecution","command":{"cmd":"ls"},"output":"o","exitCode":0},
				{"role":"bashExecution","command":null,"output":"o","exitCode":0},
				{"role":"bashExecution","command":true,"output":"o","exitCode":0}]`,
			expect: `[]`,
		},
		{
			name: "white space is what unicode.IsSpace accepts: NBSP, em space, NEL, ideographic space",
			records: `[{"role":"bashExecution","command":"\u00a0\u2003\u3000\u0085\u1680","output":"o","exitCode":0},
				{"role":"bashExecution","command":"\u00a0ls -l\u2003","output":"a\u00a0\u2003\u3000\u0085\u2028","exitCode":0},
				{"role":"bashExecution","command":"\u00a0","output":"o","exitCode":0}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ ls -l\nexit=0\noutput:\na\n</local_shell>") + `}]`,
		},
		{
			name: "a zero-width space or a BOM is not white space",
			records: `[{"role":"bashExecution","command":"\u200b","output":"a\u200b","exitCode":0},
				{"role":"bashExecution","command":" \ufeffx ","output":"b\ufeff\n","exitCode":0}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ \u200b\nexit=0\noutput:\na\u200b\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ \ufeffx\nexit=0\noutput:\nb\ufeff\n</local_shell>") + `}]`,
		},
		{
			name:    "output of Unicode white space only is not empty: it trims to an empty line",
			records: `[{"role":"bashExecution","command":"x","output":"\u00a0\u2003","exitCode":0}]`,
			expect:  `[{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\n\n</local_shell>") + `}]`,
		},
		{
			name:    "the command keeps its inner white space, the output its leading white space",
			records: `[{"role":"bashExecution","command":" \techo  a\n\tb \n","output":"\n  x\r\n\r\n","exitCode":0}]`,
			expect:  `[{"role":"user","content":` + shell("<local_shell>\n$ echo  a\n\tb\nexit=0\noutput:\n\n  x\n</local_shell>") + `}]`,
		},
		{
			name: "an output array adds only the string text of its text blocks",
			records: `[{"role":"bashExecution","command":"x","exitCode":0,"output":[
				{"type":"text","text":1},{"type":"text","text":null},{"type":"text"},
				{"type":"text","text":["a"]},{"type":"text","text":{"t":"b"}},
				{"type":"Text","text":"no"},{"text":"untyped"},{"type":"output_text","text":"no"},
				{"type":"image","data":"I","text":"no"},
				{"type":"text","text":"yes"},[{"type":"text","text":"nested"}],"str",7,null,
				{"type":"text","text":" too"}]}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\nyes too\n</local_shell>") + `}]`,
		},
		{
			name: "an output array without string text is empty",
			records: `[{"role":"bashExecution","command":"x","exitCode":0,"output":[{"type":"image","data":"I"},{"type":"text","text":5}]},
				{"role":"bashExecution","command":"x","exitCode":0,"output":[{"type":"text","text":""}]},
				{"role":"bashExecution","command":"x","exitCode":0,"output":[{"type":"text","text":" \n"}]}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput: (empty)\n\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput: (empty)\n\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\n\n</local_shell>") + `}]`,
		},
		{
			name: "an output that is neither a string nor an array is empty",
			records: `[{"role":"bashExecution","command":"x","exitCode":0,"output":{"type":"text","text":"m"}},
				{"role":"bashExecution","command":"x","exitCode":0,"output":true},
				{"role":"bashExecution","command":"x","exitCode":0,"output":null},
				{"role":"bashExecution","command":"x","exitCode":0}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput: (empty)\n\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput: (empty)\n\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput: (empty)\n\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput: (empty)\n\n</local_shell>") + `}]`,
		},
		{
			name: "a shell message copies only role, content and timestamp",
			records: `[{"role":"bashExecution","command":"ls","output":"o","exitCode":0,"id":"b1",
				"cwd":"/repo","display":true,"content":"ignored","timestamp":5}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ ls\nexit=0\noutput:\no\n</local_shell>") + `,"timestamp":5}]`,
			exact:  true,
		},
	})
}

func TestBuild_Timestamps(t *testing.T) {
	// Each timestamp is given to an extension message; "" expects the
	// output without a timestamp key.
	cases := []struct{ name, in, out string }{
		{"whole seconds", `"2024-01-01T00:00:00Z"`, `1704067200000`},
		{"one fraction digit", `"2024-01-01T00:00:00.1Z"`, `1704067200100`},
		{"two fraction digits", `"2024-01-01T00:00:00.12Z"`, `1704067200120`},
		{"nanoseconds round down", `"2024-01-01T00:00:00.123456789Z"`, `1704067200123`},
		{"many nines round down", `"2024-01-01T00:00:00.99999999999999999999999Z"`, `1704067200999`},
		{"below a millisecond rounds down to it", `"2024-01-01T00:00:00.0009Z"`, `1704067200000`},
		{"the epoch", `"1970-01-01T00:00:00Z"`, `0`},
		{"just before the epoch rounds toward the past", `"1969-12-31T23:59:59.9995Z"`, `-1`},
		{"a whole second before the epoch", `"1969-12-31T23:59:59Z"`, `-1000`},
		{"a fraction before the epoch rounds toward the past", `"1969-12-31T23:59:59.0001Z"`, `-1000`},
		{"before the epoch with an offset", `"1969-12-31T19:00:00.5-05:00"`, `500`},
		{"1969", `"1969-07-20T20:17:40Z"`, `-14182940000`},
		{"1900", `"1900-01-01T00:00:00Z"`, `-2208988800000`},
		{"year 1", `"0001-01-01T00:00:00Z"`, `-62135596800000`},
		{"year 0", `"0000-03-01T00:00:00Z"`, `-62162035200000`},
		{"offset +14:00", `"2024-01-01T14:00:00+14:00"`, `1704067200000`},
		{"offset -12:00", `"2023-12-31T12:00:00-12:00"`, `1704067200000`},
		{"offset +05:30", `"2024-01-01T05:30:00+05:30"`, `1704067200000`},
		{"offset +23:59", `"2024-01-01T23:59:00+23:59"`, `1704067200000`},
		{"offset -00:00", `"2024-01-01T00:00:00-00:00"`, `1704067200000`},
		{"offset +00:00 with a fraction", `"2023-12-31T23:59:59.999+00:00"`, `1704067199999`},
		{"Feb 29 of 2024", `"2024-02-29T00:00:00Z"`, `1709164800000`},
		{"Feb 29 of 2000", `"2000-02-29T00:00:00Z"`, `951782400000`},
		{"the last instant of year 9999, west of UTC", `"9999-12-31T23:59:59-23:59"`, `253402387139000`},

		{"lower-case t", `"2024-01-01t00:00:00Z"`, ``},
		{"lower-case z", `"2024-01-01T00:00:00z"`, ``},
		{"no offset", `"2024-01-01T00:00:00"`, ``},
		{"no offset after a fraction", `"2024-01-01T00:00:00.123"`, ``},
		{"month 13", `"2024-13-01T00:00:00Z"`, ``},
		{"month 00", `"2024-00-10T00:00:00Z"`, ``},
		{"day 00", `"2024-01-00T00:00:00Z"`, ``},
		{"day 32", `"2024-01-32T00:00:00Z"`, ``},
		{"April 31", `"2024-04-31T00:00:00Z"`, ``},
		{"Feb 29 of 2023", `"2023-02-29T00:00:00Z"`, ``},
		{"Feb 29 of 1900", `"1900-02-29T00:00:00Z"`, ``},
		{"Feb 30 of 2024", `"2024-02-30T00:00:00Z"`, ``},
		{"hour 24", `"2024-01-01T24:00:00Z"`, ``},
		{"minute 60", `"2024-01-01T23:60:00Z"`, ``},
		{"second 60", `"2024-01-01T23:59:60Z"`, ``},
		{"second 60 even on a leap-second day", `"2016-12-31T23:59:60Z"`, ``},
		{"a date only", `"2024-01-01"`, ``},
		{"a space for T", `"2024-01-01 00:00:00Z"`, ``},
		{"prose", `"yesterday"`, ``},
		{"the empty string", `""`, ``},
		{"a point without digits", `"2024-01-01T00:00:00.Z"`, ``},
		{"a comma fraction", `"2024-01-01T00:00:00,5Z"`, ``},
		{"offset hour 24", `"2024-01-01T00:00:00+24:00"`, ``},
		{"offset minute 60", `"2024-01-01T00:00:00+05:60"`, ``},
		{"offset without a colon", `"2024-01-01T00:00:00+0530"`, ``},
		{"offset without minutes", `"2024-01-01T00:00:00+05"`, ``},
		{"offset after Z", `"2024-01-01T00:00:00Z+01:00"`, ``},
		{"a Unicode minus", `"2024-01-01T00:00:00` + "\u2212" + `05:00"`, ``},
		{"a space before Z", `"2024-01-01T00:00:00 Z"`, ``},
		{"a leading space", `" 2024-01-01T00:00:00Z"`, ``},
		{"a trailing space", `"2024-01-01T00:00:00Z "`, ``},
		{"a one-digit month", `"2024-1-01T00:00:00Z"`, ``},
		{"a one-digit hour", `"2024-01-01T0:00:00Z"`, ``},
		{"a two-digit year", `"24-01-01T00:00:00Z"`, ``},
		{"a five-digit year", `"12024-01-01T00:00:00Z"`, ``},
		{"a signed year", `"+2024-01-01T00:00:00Z"`, ``},
		{"full-width digits", `"２０２４-01-01T00:00:00Z"`, ``},
		{"a zone name", `"2024-01-01T00:00:00UTC"`, ``},
		{"no seconds", `"2024-01-01T00:00Z"`, ``},
		{"digits as a string", `"1767225600000"`, ``},
		{"null", `null`, ``},
		{"a boolean", `true`, ``},
		{"an array", `[1767225600000]`, ``},
		{"a map", `{"ms":1767225600000}`, ``},

		{"a number is kept as written", `1.5e3`, `1.5e3`},
		{"a negative number", `-1`, `-1`},
		{"zero", `0`, `0`},
		{"negative zero", `-0.0`, `-0.0`},
		{"a fraction", `1767225600000.5`, `1767225600000.5`},
		{"2^53+1", `9007199254740993`, `9007199254740993`},
		{"2^64+1", `18446744073709551617`, `18446744073709551617`},
	}
	var rc []ruleCase
	for _, c := range cases {
		in := `[{"role":"custom","content":"c","timestamp":` + c.in + `}]`
		out := `[{"role":"user","content":[{"type":"text","text":"c"}]}]`
		if c.out != "" {
			out = `[{"role":"user","content":[{"type":"text","text":"c"}],"timestamp":` + c.out + `}]`
		}
		rc = append(rc, ruleCase{name: c.name, records: in, expect: out, exact: true})
	}
	rc = append(rc,
		ruleCase{
			name:     "1E400 is kept as written",
			records:  `[{"role":"custom","content":"c","timestamp":1E400}]`,
			expect:   `[{"role":"user","content":[{"type":"text","text":"c"}],"timestamp":1E400}]`,
			exact:    true,
			jsonOnly: true,
		},
		ruleCase{
			name: "a missing timestamp",
			records: `[{"role":"custom","content":"c"},
				{"role":"bashExecution","command":"x","output":"o","exitCode":0}]`,
			expect: `[{"role":"user","content":[{"type":"text","text":"c"}]},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\no\n</local_shell>") + `}]`,
			exact: true,
		},
		ruleCase{
			name: "shell runs convert their timestamps the same way",
			records: `[{"role":"bashExecution","command":"x","output":"o","exitCode":0,"timestamp":"1969-12-31T23:59:59.9995Z"},
				{"role":"bashExecution","command":"x","output":"o","exitCode":0,"timestamp":"2024-02-30T00:00:00Z"},
				{"role":"bashExecution","command":"x","output":"o","exitCode":0,"timestamp":1.5e3}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\no\n</local_shell>") + `,"timestamp":-1},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":` + shell("<local_shell>\n$ x\nexit=0\noutput:\no\n</local_shell>") + `,"timestamp":1.5e3}]`,
			exact: true,
		},
	)
	runRuleCases(t, rc)
}

func TestBuild_Pairing(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			name: "a call's id is the first string among its id fields: non-strings are skipped",
			records: `[{"role":"assistant","content":[
					{"type":"toolCall","id":5,"toolCallId":"a","name":"x"},
					{"type":"tool_use","id":null,"toolCallId":["z"],"tool_call_id":"b","name":"y"},
					{"type":"tool_call","id":{},"toolCallId":true,"tool_call_id":1,"tool_call_id$":"c","name":"z"}]},
				{"role":"toolResult","toolCallId":"a","content":"1"},
				{"role":"toolResult","toolCallId":9,"tool_call_id":"b","content":"2"},
				{"role":"tool","toolCallId":null,"tool_call_id":[],"tool_call_id$":"c","content":"3"}]`,
			expect: `[{"role":"assistant","content":[
					{"type":"toolCall","id":5,"toolCallId":"a","name":"x"},
					{"type":"tool_use","id":null,"toolCallId":["z"],"tool_call_id":"b","name":"y"},
					{"type":"tool_call","id":{},"toolCallId":true,"tool_call_id":1,"tool_call_id$":"c","name":"z"}]},
				{"role":"toolResult","toolCallId":"a","content":"1"},
				{"role":"toolResult","toolCallId":9,"tool_call_id":"b","content":"2"},
				{"role":"tool","toolCallId":null,"tool_call_id":[],"tool_call_id$":"c","content":"3"}]`,
			dropped: `{}`,
		},
		{
			name: "an empty string is the first string, and counts as no id",
			records: `[{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"toolCall","id":"","toolCallId":"e","name":"x"}]},
				{"role":"toolResult","toolCallId":"","tool_call_id":"e","content":"r1"},
				{"role":"toolResult","toolCallId":"e","content":"r2"}]`,
			expect:  `[{"role":"assistant","content":[{"type":"text","text":"t"}]}]`,
			dropped: `{"unpaired_calls":[{"id":"","tool":"x","seq":1}],"orphan_results":[{"id":"","seq":2},{"id":"e","seq":3}]}`,
		},
		{
			name: "a result message's id never comes from id",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"x"}]},
				{"role":"toolResult","id":"c1","content":"r"}]`,
			expect:  `[]`,
			dropped: `{"unpaired_calls":[{"id":"c1","tool":"x","seq":1}],"orphan_results":[{"id":"","seq":2}]}`,
		},
		{
			name: "a tool_calls entry's id is its id member only",
			records: `[{"role":"assistant","content":"t","tool_calls":[{"toolCallId":"k","function":{"name":"f"}},{"id":7,"name":"g"},{"id":"","name":"h"}]},
				{"role":"tool","tool_call_id":"k","content":"r"}]`,
			expect: `[{"role":"assistant","content":"t","tool_calls":[]}]`,
			dropped: `{"unpaired_calls":[{"id":"","tool":"f","seq":1},{"id":"","tool":"g","seq":1},{"id":"","tool":"h","seq":1}],
				"orphan_results":[{"id":"k","seq":2}]}`,
		},
		{
			name: "a tool_result block's id is a string tool_use_id",
			records: `[{"role":"assistant","content":[{"type":"tool_use","id":"u1","name":"x","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":1,"content":"n"},
					{"type":"tool_result","id":"u1","content":"wrong member"},
					{"type":"tool_result","toolCallId":"u1","content":"wrong member"},
					{"type":"tool_result","tool_use_id":"","content":"empty"},
					{"type":"tool_result","tool_use_id":"u1","content":"ok"},"note"]}]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_use","id":"u1","name":"x","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"ok"},"note"]}]`,
			dropped: `{"orphan_results":[{"id":"","seq":2},{"id":"","seq":2},{"id":"","seq":2},{"id":"","seq":2}]}`,
		},
		{
			name: "results are messages with role tool or toolResult only",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"r","name":"x"}]},
				{"role":"system","toolCallId":"r","content":"not a result"},
				{"role":"user","tool_call_id":"r","content":"not a result"},
				{"role":"toolResult","toolCallId":"r","content":"ok"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"r","name":"x"}]},
				{"role":"system","toolCallId":"r","content":"not a result"},
				{"role":"user","tool_call_id":"r","content":"not a result"},
				{"role":"toolResult","toolCallId":"r","content":"ok"}]`,
			dropped: `{}`,
		},
		{
			name: "tool_result blocks answer only inside user messages",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"r","name":"x"}]},
				{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"r","content":"in assistant"}]},
				{"role":"system","content":[{"type":"tool_result","tool_use_id":"r","content":"in system"}]},
				{"role":"toolResult","content":[{"type":"tool_result","tool_use_id":"r","content":"in a result"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"r","content":"in assistant"}]},
				{"role":"system","content":[{"type":"tool_result","tool_use_id":"r","content":"in system"}]}]`,
			dropped: `{"unpaired_calls":[{"id":"r","tool":"x","seq":1}],"orphan_results":[{"id":"","seq":4}]}`,
		},
		{
			name: "assistant content that is a single map is content, not a call",
			records: `[{"role":"assistant","content":{"type":"toolCall","id":"m","name":"x"}},
				{"role":"toolResult","toolCallId":"m","content":"r"}]`,
			expect:  `[{"role":"assistant","content":{"type":"toolCall","id":"m","name":"x"}}]`,
			dropped: `{"orphan_results":[{"id":"m","seq":2}]}`,
		},
		{
			name: "tool_calls outside assistant messages hold no calls",
			records: `[{"role":"user","content":"u","tool_calls":[{"id":"q","function":{"name":"f"}}]},
				{"role":"tool","tool_call_id":"q","content":"r"}]`,
			expect:  `[{"role":"user","content":"u","tool_calls":[{"id":"q","function":{"name":"f"}}]}]`,
			dropped: `{"orphan_results":[{"id":"q","seq":2}]}`,
		},
		{
			name: "tool_result blocks in extension messages answer calls; one emptied this way is dropped",
			records: `[{"role":"assistant","content":[{"type":"tool_use","id":"e1","name":"x"}]},
				{"role":"custom","content":[{"type":"tool_result","tool_use_id":"e1","content":"ok"}]},
				{"type":"custom_message","content":[{"type":"tool_result","tool_use_id":"nope","content":"no"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_use","id":"e1","name":"x"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"e1","content":"ok"}]}]`,
			dropped: `{"orphan_results":[{"id":"nope","seq":3}]}`,
		},
		{
			name: "a user message that was empty stays; only one emptied of its tool_result blocks is dropped",
			records: `[{"role":"user","content":[]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"o1"},{"type":"tool_result","tool_use_id":"o2"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"o3"},{"type":"image","data":"U"}]}]`,
			expect: `[{"role":"user","content":[]},
				{"role":"user","content":[{"type":"image","data":"U"}]}]`,
			dropped: `{"orphan_results":[{"id":"o1","seq":2},{"id":"o2","seq":2},{"id":"o3","seq":3}]}`,
		},
		{
			name: "a user message that loses tool_result blocks keeps its other members",
			records: `[{"role":"assistant","content":[{"type":"tool_use","id":"k","name":"x"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"gone"},"keep",{"type":"tool_result","tool_use_id":"k"}],
					"timestamp":"not converted","meta":{"n":18446744073709551617}}]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_use","id":"k","name":"x"}]},
				{"role":"user","content":["keep",{"type":"tool_result","tool_use_id":"k"}],
					"timestamp":"not converted","meta":{"n":18446744073709551617}}]`,
			dropped: `{"orphan_results":[{"id":"gone","seq":2}]}`,
			exact:   true,
		},
		{
			name: "calls sharing an id in one message are kept or reported together",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"d","name":"x"},{"type":"toolCall","id":"d","name":"y"}],
					"tool_calls":[{"id":"d","function":{"name":"z"}}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"e","name":"x"},{"type":"text","text":"t"},{"type":"toolCall","id":"e","name":"y"}]},
				{"role":"toolResult","toolCallId":"d","content":"r"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"d","name":"x"},{"type":"toolCall","id":"d","name":"y"}],
					"tool_calls":[{"id":"d","function":{"name":"z"}}]},
				{"role":"assistant","content":[{"type":"text","text":"t"}]},
				{"role":"toolResult","toolCallId":"d","content":"r"}]`,
			dropped: `{"unpaired_calls":[{"id":"e","tool":"x","seq":2},{"id":"e","tool":"y","seq":2}]}`,
		},
		{
			name: "an assistant message is dropped when nothing usable is left",
			records: `[{"role":"assistant","content":"   "},
				{"role":"assistant","content":"\u00a0\u2003\n"},
				{"role":"assistant","content":"\u200b"},
				{"role":"assistant","content":null},
				{"role":"assistant"},
				{"role":"assistant","content":[]},
				{"role":"assistant","content":0},
				{"role":"assistant","content":{}},
				{"role":"assistant","content":false},
				{"role":"assistant","content":[null]},
				{"role":"assistant","content":"","tool_calls":[]},
				{"role":"assistant","content":"","tool_calls":{"id":"x","function":{"name":"f"}}},
				{"role":"assistant","content":null,"tool_calls":"call"},
				{"role":"assistant","tool_calls":null},
				{"role":"assistant","content":"hi","tool_calls":{"id":"x"}}]`,
			expect: `[{"role":"assistant","content":"\u200b"},
				{"role":"assistant","content":0},
				{"role":"assistant","content":{}},
				{"role":"assistant","content":false},
				{"role":"assistant","content":[null]},
				{"role":"assistant","content":"hi","tool_calls":{"id":"x"}}]`,
			dropped: `{}`,
		},
		{
			name: "tool_calls entries that are not maps are calls without an id",
			records: `[{"role":"assistant","content":"hi","tool_calls":[5,"x",null,[]]},
				{"role":"assistant","content":" ","tool_calls":[{"id":"nope"}]}]`,
			expect: `[{"role":"assistant","content":"hi","tool_calls":[]}]`,
			dropped: `{"unpaired_calls":[{"id":"","tool":"","seq":1},{"id":"","tool":"","seq":1},{"id":"","tool":"","seq":1},
				{"id":"","tool":"","seq":1},{"id":"nope","tool":"","seq":2}]}`,
		},
		{
			name: "blank content stays for a remaining tool_calls entry",
			records: `[{"role":"assistant","content":"  ","tool_calls":[
					{"id":"k","type":"function","function":{"name":"f","arguments":"{}"}},
					{"id":"gone","type":"function","function":{"name":"g","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"k","content":"r"}]`,
			expect: `[{"role":"assistant","content":"  ","tool_calls":[{"id":"k","type":"function","function":{"name":"f","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"k","content":"r"}]`,
			dropped: `{"unpaired_calls":[{"id":"gone","tool":"g","seq":1}]}`,
		},
		{
			name: "call blocks and tool_calls entries of one message pair independently",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"a","name":"x"},{"type":"text","text":"t"}],
					"tool_calls":[{"id":"b","function":{"name":"y"}}]},
				{"role":"tool","tool_call_id":"b","content":"r"}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"t"}],"tool_calls":[{"id":"b","function":{"name":"y"}}]},
				{"role":"tool","tool_call_id":"b","content":"r"}]`,
			dropped: `{"unpaired_calls":[{"id":"a","tool":"x","seq":1}]}`,
		},
		{
			name: "an id whose first result precedes its first call stays unpaired for good",
			records: `[{"role":"toolResult","toolCallId":"z","content":"early"},
				{"role":"assistant","content":[{"type":"toolCall","id":"z","name":"x"}]},
				{"role":"toolResult","toolCallId":"z","content":"late"},
				{"role":"assistant","content":[{"type":"toolCall","id":"z","name":"x"}]},
				{"role":"toolResult","toolCallId":"z","content":"later"}]`,
			expect: `[]`,
			dropped: `{"unpaired_calls":[{"id":"z","tool":"x","seq":2},{"id":"z","tool":"x","seq":4}],
				"orphan_results":[{"id":"z","seq":1},{"id":"z","seq":3},{"id":"z","seq":5}]}`,
		},
		{
			name: "a paired id keeps every call and every later result, wherever they are",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"d","name":"x"}]},
				{"role":"user","content":"meanwhile"},
				{"role":"toolResult","toolCallId":"d","content":"1"},
				{"role":"assistant","content":[{"type":"toolCall","id":"d","name":"x"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"d","content":"2"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"d","name":"x"}]},
				{"role":"user","content":"meanwhile"},
				{"role":"toolResult","toolCallId":"d","content":"1"},
				{"role":"assistant","content":[{"type":"toolCall","id":"d","name":"x"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"d","content":"2"}]}]`,
			dropped: `{}`,
		},
		{
			name: "a shell run and an extension message between a call and its result change nothing",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"s","name":"x"}]},
				{"role":"bashExecution","command":"ls","output":"o","exitCode":0},
				{"role":"custom","content":"note"},
				{"role":"toolResult","toolCallId":"s","content":"r"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"s","name":"x"}]},
				{"role":"user","content":` + shell("<local_shell>\n$ ls\nexit=0\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":[{"type":"text","text":"note"}]},
				{"role":"toolResult","toolCallId":"s","content":"r"}]`,
			dropped: `{}`,
		},
	})
}

// TestBuild_AssistantExtensionMessages covers change A of CONTEXT.md 1.1:
// an extension message whose details is a map with role "assistant" is an
// assistant message, and everything later treats it as one.
func TestBuild_AssistantExtensionMessages(t *testing.T) {
	const voice = `"customType":"voice_omni_transcript","details":{"role":"assistant"}`
	runRuleCases(t, []ruleCase{
		{
			name: "the example of section 2.2",
			records: `[{"role":"custom","customType":"voice_omni_transcript","content":"We can prepare tomorrow",
				"details":{"role":"assistant"},"timestamp":1}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"We can prepare tomorrow"}],"timestamp":1}]`,
			exact:  true,
		},
		{
			name: "role custom and type custom_message both become assistant messages, copying only role, content and timestamp",
			records: `[{"type":"custom_message","content":"a",` + voice + `,"display":false,"id":"e1","extra":1},
				{"role":"custom","type":"custom_message","content":"b",` + voice + `,"timestamp":"2026-01-01T00:00:00.250+01:00"},
				{"type":"custom_message","role":"user","content":"c",` + voice + `},
				{"type":"custom_message","role":"toolResult","toolCallId":"x","content":"d",` + voice + `}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"a"}]},
				{"role":"assistant","content":[{"type":"text","text":"b"}],"timestamp":1767222000250},
				{"role":"assistant","content":[{"type":"text","text":"c"}]},
				{"role":"assistant","content":[{"type":"text","text":"d"}]}]`,
			dropped: `{}`,
			exact:   true,
		},
		{
			name: "the record's own role does not make an extension message an assistant one; details.role does",
			records: `[{"type":"custom_message","role":"assistant","content":"a"},
				{"type":"custom_message","role":"assistant","content":"b","details":{"role":"user"}},
				{"type":"custom_message","role":"user","content":"c","details":{"role":"assistant"}}]`,
			expect: `[{"role":"user","content":[{"type":"text","text":"a"}]},
				{"role":"user","content":[{"type":"text","text":"b"}]},
				{"role":"assistant","content":[{"type":"text","text":"c"}]}]`,
		},
		{
			name: "an assistant extension message's tool_calls is not copied, so holds no calls",
			records: `[{"role":"custom","content":"calling","tool_calls":[{"id":"x","function":{"name":"bash"}}],` + voice + `},
				{"role":"tool","tool_call_id":"x","content":"r"}]`,
			expect:  `[{"role":"assistant","content":[{"type":"text","text":"calling"}]}]`,
			dropped: `{"orphan_results":[{"id":"x","seq":2}]}`,
		},
		{
			name:    "details.role assistant wins over other details members",
			records: `[{"role":"custom","content":"a","details":{"durationMs":2100,"role":"assistant","voice":"alloy"}}]`,
			expect:  `[{"role":"assistant","content":[{"type":"text","text":"a"}]}]`,
		},
		{
			name: "only a details map whose role is the string assistant makes an assistant message",
			records: `[{"role":"custom","content":"user role","details":{"role":"user"}},
				{"role":"custom","content":"other role","details":{"role":"system"}},
				{"role":"custom","content":"capitalised","details":{"role":"Assistant"}},
				{"role":"custom","content":"padded","details":{"role":" assistant"}},
				{"role":"custom","content":"array role","details":{"role":["assistant"]}},
				{"role":"custom","content":"map role","details":{"role":{"role":"assistant"}}},
				{"role":"custom","content":"number role","details":{"role":1}},
				{"role":"custom","content":"bool role","details":{"role":true}},
				{"role":"custom","content":"null role","details":{"role":null}},
				{"role":"custom","content":"no role","details":{"Role":"assistant","speaker":"assistant"}},
				{"role":"custom","content":"empty details","details":{}},
				{"role":"custom","content":"string details","details":"assistant"},
				{"role":"custom","content":"array details","details":["assistant",{"role":"assistant"}]},
				{"role":"custom","content":"null details","details":null},
				{"role":"custom","content":"number details","details":1},
				{"role":"custom","content":"no details","role_":"assistant","speaker":{"role":"assistant"}},
				{"role":"custom","content":"top-level only","details":{"nested":{"role":"assistant"}}}]`,
			expect: `[{"role":"user","content":[{"type":"text","text":"user role"}]},
				{"role":"user","content":[{"type":"text","text":"other role"}]},
				{"role":"user","content":[{"type":"text","text":"capitalised"}]},
				{"role":"user","content":[{"type":"text","text":"padded"}]},
				{"role":"user","content":[{"type":"text","text":"array role"}]},
				{"role":"user","content":[{"type":"text","text":"map role"}]},
				{"role":"user","content":[{"type":"text","text":"number role"}]},
				{"role":"user","content":[{"type":"text","text":"bool role"}]},
				{"role":"user","content":[{"type":"text","text":"null role"}]},
				{"role":"user","content":[{"type":"text","text":"no role"}]},
				{"role":"user","content":[{"type":"text","text":"empty details"}]},
				{"role":"user","content":[{"type":"text","text":"string details"}]},
				{"role":"user","content":[{"type":"text","text":"array details"}]},
				{"role":"user","content":[{"type":"text","text":"null details"}]},
				{"role":"user","content":[{"type":"text","text":"number details"}]},
				{"role":"user","content":[{"type":"text","text":"no details"}]},
				{"role":"user","content":[{"type":"text","text":"top-level only"}]}]`,
		},
		{
			name: "a shell run, a context row and rule 6 records are not extension messages, whatever their details",
			records: `[{"role":"bashExecution","command":"ls","output":"o","exitCode":0,"details":{"role":"assistant"}},
				{"kind":"context","role":"custom","content":"ctx","details":{"role":"assistant"}},
				{"type":"custom","customType":"state","data":{},"details":{"role":"assistant"}},
				{"role":"user","content":"u","details":{"role":"assistant"}}]`,
			expect: `[{"role":"user","content":` + shell("<local_shell>\n$ ls\nexit=0\noutput:\no\n</local_shell>") + `},
				{"role":"user","content":"u","details":{"role":"assistant"}}]`,
		},
		{
			name: "assistant extension content: a string or any non-array is a text block, which is usable even when empty",
			records: `[{"role":"custom","content":"",` + voice + `},
				{"role":"custom","content":"   ",` + voice + `},
				{"role":"custom","content":null,` + voice + `},
				{"role":"custom","content":0,` + voice + `},
				{"role":"custom","content":{"type":"text","text":"m"},` + voice + `},
				{"role":"custom",` + voice + `}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":""}]},
				{"role":"assistant","content":[{"type":"text","text":"   "}]},
				{"role":"assistant","content":[{"type":"text","text":""}]},
				{"role":"assistant","content":[{"type":"text","text":""}]},
				{"role":"assistant","content":[{"type":"text","text":""}]},
				{"role":"assistant","content":[{"type":"text","text":""}]}]`,
			dropped: `{}`,
		},
		{
			name: "assistant extension content: an array is kept as it is, and an empty one drops the message",
			records: `[{"role":"custom","content":[],` + voice + `},
				{"type":"custom_message","content":[],"details":{"role":"user"}},
				{"role":"custom","content":["raw",5,null],` + voice + `},
				{"role":"custom","content":[null],` + voice + `},
				{"role":"custom","content":[{"type":"text","text":""}],` + voice + `}]`,
			expect: `[{"role":"user","content":[]},
				{"role":"assistant","content":["raw",5,null]},
				{"role":"assistant","content":[null]},
				{"role":"assistant","content":[{"type":"text","text":""}]}]`,
			dropped: `{}`,
		},
		{
			name: "an assistant extension message between a call and its result does not break the pair",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"clock"}]},
				{"role":"custom","content":"Let me check the clock.",` + voice + `},
				{"role":"toolResult","toolCallId":"t1","content":"21:04"},
				{"role":"assistant","content":"",` + `"tool_calls":[{"id":"t2","function":{"name":"clock"}}]},
				{"role":"custom","content":"One more look.",` + voice + `},
				{"type":"custom_message","content":"and the user speaks","details":{"role":"user"}},
				{"role":"tool","tool_call_id":"t2","content":"21:05"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"clock"}]},
				{"role":"assistant","content":[{"type":"text","text":"Let me check the clock."}]},
				{"role":"toolResult","toolCallId":"t1","content":"21:04"},
				{"role":"assistant","content":"","tool_calls":[{"id":"t2","function":{"name":"clock"}}]},
				{"role":"assistant","content":[{"type":"text","text":"One more look."}]},
				{"role":"user","content":[{"type":"text","text":"and the user speaks"}]},
				{"role":"tool","tool_call_id":"t2","content":"21:05"}]`,
			dropped: `{}`,
		},
		{
			name: "call blocks in an assistant extension message are calls: paired ones stay, unpaired ones are removed and reported",
			records: `[{"role":"custom","content":[{"type":"text","text":"checking"},{"type":"toolCall","id":"v1","name":"bash"},
					{"type":"tool_use","id":"v2","name":"read"},{"type":"tool_call","name":"edit"}],` + voice + `},
				{"role":"custom","content":[{"type":"toolCall","id":"v3","name":"bash"}],` + voice + `},
				{"role":"toolResult","toolCallId":"v1","content":"ok"}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"toolCall","id":"v1","name":"bash"}]},
				{"role":"toolResult","toolCallId":"v1","content":"ok"}]`,
			dropped: `{"unpaired_calls":[{"id":"v2","tool":"read","seq":1},{"id":"","tool":"edit","seq":1},{"id":"v3","tool":"bash","seq":2}]}`,
		},
		{
			name: "a call in an assistant extension message pairs with a tool_result block of a user extension message",
			records: `[{"role":"custom","content":[{"type":"tool_use","id":"v1","name":"x"}],` + voice + `},
				{"role":"custom","content":[{"type":"tool_result","tool_use_id":"v1","content":"ok"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_use","id":"v1","name":"x"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"v1","content":"ok"}]}]`,
			dropped: `{}`,
		},
		{
			name: "call blocks in a user extension message are not calls",
			records: `[{"role":"custom","content":[{"type":"toolCall","id":"u1","name":"x"}],"details":{"role":"user"}},
				{"role":"toolResult","toolCallId":"u1","content":"r"}]`,
			expect:  `[{"role":"user","content":[{"type":"toolCall","id":"u1","name":"x"}]}]`,
			dropped: `{"orphan_results":[{"id":"u1","seq":2}]}`,
		},
		{
			name: "a tool_result block in an assistant extension message answers no call and stays",
			records: `[{"role":"assistant","content":[{"type":"tool_use","id":"r1","name":"x"}]},
				{"role":"custom","content":[{"type":"tool_result","tool_use_id":"r1","content":"said aloud"}],` + voice + `},
				{"role":"custom","content":[{"type":"tool_result","tool_use_id":"nobody","content":"n"}],` + voice + `}]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"r1","content":"said aloud"}]},
				{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"nobody","content":"n"}]}]`,
			dropped: `{"unpaired_calls":[{"id":"r1","tool":"x","seq":1}]}`,
		},
		{
			name: "a tool_result block in an assistant extension message is not a first result: a later result still pairs",
			records: `[{"role":"custom","content":[{"type":"tool_result","tool_use_id":"r1","content":"early"}],` + voice + `},
				{"role":"assistant","content":[{"type":"tool_use","id":"r1","name":"x"}]},
				{"role":"custom","content":[{"type":"tool_result","tool_use_id":"r1","content":"between"}],` + voice + `},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"r1","content":"the result"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"r1","content":"early"}]},
				{"role":"assistant","content":[{"type":"tool_use","id":"r1","name":"x"}]},
				{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"r1","content":"between"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"r1","content":"the result"}]}]`,
			dropped: `{}`,
		},
		{
			name: "the same tool_result block before the call in a user extension message unpairs the id for good",
			records: `[{"role":"custom","content":[{"type":"tool_result","tool_use_id":"r1","content":"early"}],"details":{"role":"user"}},
				{"role":"assistant","content":[{"type":"tool_use","id":"r1","name":"x"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"r1","content":"the result"}]}]`,
			expect:  `[]`,
			dropped: `{"unpaired_calls":[{"id":"r1","tool":"x","seq":2}],"orphan_results":[{"id":"r1","seq":1},{"id":"r1","seq":3}]}`,
		},
		{
			name: "a snapshot converts assistant extension messages; their calls report the compaction's sequence",
			records: `[{"role":"user","content":"old"},` + checkpoint(`[
					{"role":"custom","content":"spoken in the snapshot",`+voice+`,"timestamp":"2024-01-01T00:00:00.5Z"},
					{"role":"custom","content":[{"type":"text","text":"t"},{"type":"toolCall","id":"s1","name":"bash"},{"type":"toolCall","id":"s2","name":"read"}],`+voice+`},
					{"role":"custom","content":[{"type":"toolCall","id":"s3","name":"edit"}],`+voice+`},
					{"role":"custom","content":[],`+voice+`},
					{"type":"custom_message","content":"a user note","details":{"role":"user"}}]`) + `,
				{"role":"toolResult","toolCallId":"s1","content":"after the checkpoint"}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"spoken in the snapshot"}],"timestamp":1704067200500},
				{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"toolCall","id":"s1","name":"bash"}]},
				{"role":"user","content":[{"type":"text","text":"a user note"}]},
				{"role":"toolResult","toolCallId":"s1","content":"after the checkpoint"}]`,
			dropped: `{"unpaired_calls":[{"id":"s2","tool":"read","seq":2},{"id":"s3","tool":"edit","seq":2}]}`,
		},
		{
			name: "a browser call in an assistant extension message makes its results browser results",
			records: `[{"role":"custom","content":[{"type":"toolCall","id":"b1","name":"browser_use"}],` + voice + `},
				{"role":"toolResult","toolCallId":"b1","content":[{"type":"image","data":"A"}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use"}]},
				{"role":"toolResult","toolCallId":"b2","content":[{"type":"image","data":"B"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use"}]},
				{"role":"toolResult","toolCallId":"b1","content":[` + omitted + `]},
				{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use"}]},
				{"role":"toolResult","toolCallId":"b2","content":[{"type":"image","data":"B"}]}]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "images of an assistant extension message stay, in a tool_result block for a browser call too",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use"}]},
				{"role":"custom","content":[{"type":"image","data":"DRAWN"},
					{"type":"tool_result","tool_use_id":"b1","content":[{"type":"image","data":"SAID"}]}],` + voice + `},
				{"role":"toolResult","toolCallId":"b1","content":[{"type":"image","data":"A"}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use"}]},
				{"role":"toolResult","toolCallId":"b2","content":[{"type":"image","data":"B"}]},
				{"role":"custom","content":[{"type":"image","data":"LATE"}],` + voice + `}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use"}]},
				{"role":"assistant","content":[{"type":"image","data":"DRAWN"},
					{"type":"tool_result","tool_use_id":"b1","content":[{"type":"image","data":"SAID"}]}]},
				{"role":"toolResult","toolCallId":"b1","content":[` + omitted + `]},
				{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use"}]},
				{"role":"toolResult","toolCallId":"b2","content":[{"type":"image","data":"B"}]},
				{"role":"assistant","content":[{"type":"image","data":"LATE"}]}]`,
			dropped: `{"images_omitted":1}`,
		},
	})
}

// TestBuild_ProviderExecutedCalls covers change B of CONTEXT.md 1.1: a
// call whose providerExecuted is true pairs like any call but is never
// removed for being unpaired, nor reported.
func TestBuild_ProviderExecutedCalls(t *testing.T) {
	const pe = `"providerExecuted":true`
	runRuleCases(t, []ruleCase{
		{
			name: "provider-executed call blocks without a result stay and are not reported; other calls are removed",
			records: `[{"role":"assistant","content":[{"type":"text","text":"searching"},
					{"type":"toolCall","id":"p1","name":"web_search",` + pe + `},
					{"type":"tool_use","toolCallId":"p2","name":"code_run","input":{},` + pe + `},
					{"type":"tool_call","id":7,"tool_call_id$":"p3","name":"web_fetch",` + pe + `},
					{"type":"toolCall","id":"n1","name":"bash"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"searching"},
					{"type":"toolCall","id":"p1","name":"web_search",` + pe + `},
					{"type":"tool_use","toolCallId":"p2","name":"code_run","input":{},` + pe + `},
					{"type":"tool_call","id":7,"tool_call_id$":"p3","name":"web_fetch",` + pe + `}]}]`,
			dropped: `{"unpaired_calls":[{"id":"n1","tool":"bash","seq":1}]}`,
			exact:   true,
		},
		{
			name: "a provider-executed call pairs with the results after it, which are kept",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search",` + pe + `}]},
				{"role":"user","content":"meanwhile"},
				{"role":"toolResult","toolCallId":"p1","content":"found"},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"p1","content":"again"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search",` + pe + `}]},
				{"role":"user","content":"meanwhile"},
				{"role":"toolResult","toolCallId":"p1","content":"found"},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"p1","content":"again"}]}]`,
			dropped: `{}`,
		},
		{
			name: "a provider-executed call without an id stays; a result without an id is still dropped",
			records: `[{"role":"assistant","content":[{"type":"toolCall","name":"a",` + pe + `},
					{"type":"toolCall","id":"","name":"b",` + pe + `},
					{"type":"tool_use","id":5,"toolCallId":null,"name":"c",` + pe + `}]},
				{"role":"toolResult","content":"no id"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","name":"a",` + pe + `},
					{"type":"toolCall","id":"","name":"b",` + pe + `},
					{"type":"tool_use","id":5,"toolCallId":null,"name":"c",` + pe + `}]}]`,
			dropped: `{"orphan_results":[{"id":"","seq":2}]}`,
		},
		{
			name: "providerExecuted counts only when it is the boolean true",
			records: `[{"role":"assistant","content":[{"type":"text","text":"t"},
					{"type":"toolCall","id":"s","name":"a","providerExecuted":"true"},
					{"type":"toolCall","id":"o","name":"b","providerExecuted":1},
					{"type":"toolCall","id":"f","name":"c","providerExecuted":1.0},
					{"type":"toolCall","id":"x","name":"d","providerExecuted":false},
					{"type":"toolCall","id":"n","name":"e","providerExecuted":null},
					{"type":"toolCall","id":"a","name":"f","providerExecuted":[true]},
					{"type":"toolCall","id":"m","name":"g","providerExecuted":{"value":true}},
					{"type":"toolCall","id":"k","name":"h","ProviderExecuted":true,"provider_executed":true,"providerexecuted":true},
					{"type":"toolCall","id":"i","name":"i","input":{"providerExecuted":true}}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"t"}]}]`,
			dropped: `{"unpaired_calls":[{"id":"s","tool":"a","seq":1},{"id":"o","tool":"b","seq":1},{"id":"f","tool":"c","seq":1},
				{"id":"x","tool":"d","seq":1},{"id":"n","tool":"e","seq":1},{"id":"a","tool":"f","seq":1},{"id":"m","tool":"g","seq":1},
				{"id":"k","tool":"h","seq":1},{"id":"i","tool":"i","seq":1}]}`,
		},
		{
			name: "an assistant message whose only content is a provider-executed call is not empty",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search",` + pe + `},{"type":"toolCall","id":"n1","name":"bash"}]},
				{"role":"assistant","content":[{"type":"tool_use","name":"code_run",` + pe + `}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"n2","name":"bash"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search",` + pe + `}]},
				{"role":"assistant","content":[{"type":"tool_use","name":"code_run",` + pe + `}]}]`,
			dropped: `{"unpaired_calls":[{"id":"n1","tool":"bash","seq":1},{"id":"n2","tool":"bash","seq":3}]}`,
		},
		{
			name: "a result before a provider-executed call is an orphan, and the call stays unpaired but kept",
			records: `[{"role":"toolResult","toolCallId":"p","content":"early"},
				{"role":"assistant","content":[{"type":"toolCall","id":"p","name":"web_search",` + pe + `}]},
				{"role":"toolResult","toolCallId":"p","content":"late"}]`,
			expect:  `[{"role":"assistant","content":[{"type":"toolCall","id":"p","name":"web_search",` + pe + `}]}]`,
			dropped: `{"orphan_results":[{"id":"p","seq":1},{"id":"p","seq":3}]}`,
		},
		{
			name: "calls sharing an id: a provider-executed one stays, the others follow the pairing",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"d","name":"x",` + pe + `},{"type":"toolCall","id":"d","name":"y"}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"e","name":"x"}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"e","name":"y",` + pe + `}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"f","name":"x",` + pe + `}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"f","name":"y"}]},
				{"role":"toolResult","toolCallId":"e","content":"re"},
				{"role":"toolResult","toolCallId":"f","content":"rf"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"d","name":"x",` + pe + `}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"e","name":"x"}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"e","name":"y",` + pe + `}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"f","name":"x",` + pe + `}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"f","name":"y"}]},
				{"role":"toolResult","toolCallId":"e","content":"re"},
				{"role":"toolResult","toolCallId":"f","content":"rf"}]`,
			dropped: `{"unpaired_calls":[{"id":"d","tool":"y","seq":1}]}`,
		},
		{
			name: "provider-executed tool_calls entries stay whether paired, unpaired or without an id",
			records: `[{"role":"assistant","content":"","tool_calls":[
					{"id":"o1","type":"function","function":{"name":"web_search","arguments":"{}"},` + pe + `},
					{"id":"o2","type":"function","function":{"name":"web_search","arguments":"{}"},` + pe + `},
					{"type":"function","function":{"name":"code_run"},` + pe + `},
					{"id":"","name":"code_run",` + pe + `},
					{"id":"o5","type":"function","function":{"name":"bash"}}]},
				{"role":"tool","tool_call_id":"o1","content":"found"}]`,
			expect: `[{"role":"assistant","content":"","tool_calls":[
					{"id":"o1","type":"function","function":{"name":"web_search","arguments":"{}"},` + pe + `},
					{"id":"o2","type":"function","function":{"name":"web_search","arguments":"{}"},` + pe + `},
					{"type":"function","function":{"name":"code_run"},` + pe + `},
					{"id":"","name":"code_run",` + pe + `}]},
				{"role":"tool","tool_call_id":"o1","content":"found"}]`,
			dropped: `{"unpaired_calls":[{"id":"o5","tool":"bash","seq":1}]}`,
		},
		{
			name: "a remaining provider-executed tool_calls entry keeps a message with nothing else usable",
			records: `[{"role":"assistant","content":"  ","tool_calls":[{"id":"q1","function":{"name":"web_search"},` + pe + `}]},
				{"role":"assistant","content":null,"tool_calls":[{"id":"q2","function":{"name":"bash"}},{"function":{"name":"code_run"},` + pe + `}]},
				{"role":"assistant","tool_calls":[{"id":"q3","function":{"name":"web_search"},` + pe + `}]},
				{"role":"assistant","content":[],"tool_calls":[{"id":"q4","function":{"name":"bash"}}]}]`,
			expect: `[{"role":"assistant","content":"  ","tool_calls":[{"id":"q1","function":{"name":"web_search"},` + pe + `}]},
				{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"code_run"},` + pe + `}]},
				{"role":"assistant","tool_calls":[{"id":"q3","function":{"name":"web_search"},` + pe + `}]}]`,
			dropped: `{"unpaired_calls":[{"id":"q2","tool":"bash","seq":2},{"id":"q4","tool":"bash","seq":4}]}`,
		},
		{
			name: "a tool_calls entry is provider-executed by its own member only, with the boolean true",
			records: `[{"role":"assistant","content":"t","tool_calls":[
					{"id":"w1","function":{"name":"f","providerExecuted":true}},
					{"id":"w2","function":{"name":"g"},"providerExecuted":"true"},
					{"id":"w3","function":{"name":"h"},"providerExecuted":1},
					{"id":"w4","function":{"name":"i"},"providerExecuted":false},
					{"id":"w5","function":{"name":"j"},"providerExecuted":null},
					"providerExecuted",[true]]}]`,
			expect: `[{"role":"assistant","content":"t","tool_calls":[]}]`,
			dropped: `{"unpaired_calls":[{"id":"w1","tool":"f","seq":1},{"id":"w2","tool":"g","seq":1},{"id":"w3","tool":"h","seq":1},
				{"id":"w4","tool":"i","seq":1},{"id":"w5","tool":"j","seq":1},{"id":"","tool":"","seq":1},{"id":"","tool":"","seq":1}]}`,
		},
		{
			name: "the results of a provider-executed browser call are browser results",
			records: `[{"role":"assistant","content":"","tool_calls":[{"id":"b1","type":"function","function":{"name":"browser_use"},` + pe + `}]},
				{"role":"tool","tool_call_id":"b1","content":[{"type":"image","data":"A"}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use",` + pe + `}]},
				{"role":"toolResult","toolCallId":"b2","content":[{"type":"image","data":"B"}]},
				{"role":"assistant","content":"","tool_calls":[{"id":"b3","type":"function","function":{"name":"browser_use"},` + pe + `}]},
				{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"browser_use"},` + pe + `}]}]`,
			expect: `[{"role":"assistant","content":"","tool_calls":[{"id":"b1","type":"function","function":{"name":"browser_use"},` + pe + `}]},
				{"role":"tool","tool_call_id":"b1","content":[` + omitted + `]},
				{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use",` + pe + `}]},
				{"role":"toolResult","toolCallId":"b2","content":[{"type":"image","data":"B"}]},
				{"role":"assistant","content":"","tool_calls":[{"id":"b3","type":"function","function":{"name":"browser_use"},` + pe + `}]},
				{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"browser_use"},` + pe + `}]}]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "a later provider-executed browser call with an earlier result's id makes it a browser result",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash"}]},
				{"role":"toolResult","toolCallId":"c1","content":[{"type":"image","data":"A"}]},
				{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use"}]},
				{"role":"toolResult","toolCallId":"b1","content":[{"type":"image","data":"B"}]},
				{"role":"assistant","content":"","tool_calls":[{"id":"c1","function":{"name":"browser_use"},` + pe + `}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash"}]},
				{"role":"toolResult","toolCallId":"c1","content":[` + omitted + `]},
				{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use"}]},
				{"role":"toolResult","toolCallId":"b1","content":[{"type":"image","data":"B"}]},
				{"role":"assistant","content":"","tool_calls":[{"id":"c1","function":{"name":"browser_use"},` + pe + `}]}]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "a provider-executed call before a checkpoint has lost its call: a result after it is an orphan",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search",` + pe + `}]},` +
				checkpoint(`[{"role":"user","content":"S"}]`) + `,
				{"role":"toolResult","toolCallId":"p1","content":"late"}]`,
			expect:  `[{"role":"user","content":"S"}]`,
			dropped: `{"orphan_results":[{"id":"p1","seq":3}]}`,
		},
		{
			name: "a provider-executed call in a snapshot stays, and pairs with a result after the checkpoint",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search",` + pe + `}]},` +
				checkpoint(`[{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search",`+pe+`}]},
					{"role":"assistant","content":"","tool_calls":[{"id":"p2","function":{"name":"code_run"},`+pe+`},{"id":"n2","function":{"name":"bash"}}]}]`) + `,
				{"role":"toolResult","toolCallId":"p1","content":"late"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search",` + pe + `}]},
				{"role":"assistant","content":"","tool_calls":[{"id":"p2","function":{"name":"code_run"},` + pe + `}]},
				{"role":"toolResult","toolCallId":"p1","content":"late"}]`,
			dropped: `{"unpaired_calls":[{"id":"n2","tool":"bash","seq":2}]}`,
		},
		{
			name: "a provider-executed call in an assistant extension message stays",
			records: `[{"role":"custom","content":[{"type":"toolCall","id":"v1","name":"web_search",` + pe + `}],"details":{"role":"assistant"}},
				{"role":"custom","content":[{"type":"toolCall","id":"v2","name":"web_search",` + pe + `}],"details":{"role":"user"}},
				{"role":"toolResult","toolCallId":"v2","content":"r"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"v1","name":"web_search",` + pe + `}]},
				{"role":"user","content":[{"type":"toolCall","id":"v2","name":"web_search",` + pe + `}]}]`,
			dropped: `{"orphan_results":[{"id":"v2","seq":3}]}`,
		},
		{
			name: "providerExecuted outside a call changes nothing",
			records: `[{"role":"user","content":[{"type":"toolCall","id":"u1","name":"x",` + pe + `}],"tool_calls":[{"id":"u2",` + pe + `}]},
				{"role":"toolResult","toolCallId":"u1","content":"r",` + pe + `},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"u2","content":"r",` + pe + `},"keep"]},
				{"role":"assistant","content":[{"type":"text","text":"t",` + pe + `}],` + pe + `},
				{"role":"assistant","content":[{"type":"toolCall","id":"a1","name":"x"}],` + pe + `}]`,
			expect: `[{"role":"user","content":[{"type":"toolCall","id":"u1","name":"x",` + pe + `}],"tool_calls":[{"id":"u2",` + pe + `}]},
				{"role":"user","content":["keep"]},
				{"role":"assistant","content":[{"type":"text","text":"t",` + pe + `}],` + pe + `}]`,
			dropped: `{"unpaired_calls":[{"id":"a1","tool":"x","seq":5}],"orphan_results":[{"id":"u1","seq":2},{"id":"u2","seq":3}]}`,
		},
	})
}

// TestBuild_CompactionValidity changes one field of a valid compaction at
// a time: an invalid one resets nothing and is dropped.
func TestBuild_CompactionValidity(t *testing.T) {
	const absent = ""
	cases := []struct {
		field, value string // value absent removes the field
		valid        bool
	}{
		{"type", absent, false}, {"type", `"Compaction"`, false}, {"type", `null`, false},
		{"at", absent, false}, {"at", `0`, false}, {"at", `null`, false},
		{"at", `""`, true}, {"at", `"not a date"`, true},
		{"baseSeq", absent, false}, {"baseSeq", `1.5`, false}, {"baseSeq", `"2"`, false},
		{"baseSeq", `null`, false}, {"baseSeq", `true`, false}, {"baseSeq", `[2]`, false},
		{"baseSeq", `2.0`, true}, {"baseSeq", `1E1`, true}, {"baseSeq", `-3`, true},
		{"baseSeq", `18446744073709551617`, true}, {"baseSeq", `1E400`, true},
		{"plannerVersion", absent, false}, {"plannerVersion", `0.5`, false}, {"plannerVersion", `"2"`, false},
		{"plannerVersion", `{}`, false}, {"plannerVersion", `20e-1`, true},
		{"summaryModelRef", absent, false}, {"summaryModelRef", `1`, false}, {"summaryModelRef", `null`, false},
		{"summaryModelRef", `""`, true},
		{"summary", absent, false}, {"summary", `null`, false}, {"summary", `["s"]`, false},
		{"qualityAudit", absent, false}, {"qualityAudit", `"failed"`, false}, {"qualityAudit", `"Passed"`, false},
		{"qualityAudit", `"passed "`, false}, {"qualityAudit", `true`, false}, {"qualityAudit", `null`, false},
		{"qualityAudit", `"disabled"`, true},
		{"messages", absent, false}, {"messages", `{}`, false}, {"messages", `null`, false},
		{"messages", `"[]"`, false},
		{"firstKeptIndex", absent, false}, {"firstKeptIndex", `"1"`, false}, {"firstKeptIndex", `null`, false},
		{"firstKeptIndex", `1.5`, true}, {"firstKeptIndex", `-1`, true},
		{"tokensBefore", absent, false}, {"tokensBefore", `"100"`, false}, {"tokensBefore", `true`, false},
		{"tokensBefore", `1e400`, true},
		{"tokensAfter", absent, false}, {"tokensAfter", `null`, false}, {"tokensAfter", `[10]`, false},
		{"tokensAfter", `0.5`, true},
		{"handover", `null`, false}, {"handover", `[]`, false}, {"handover", `"none"`, false},
		{"handover", `{}`, true},
		{"audit", `null`, false}, {"audit", `"passed"`, false}, {"audit", `[]`, false}, {"audit", `0`, false},
		{"audit", `{}`, true},
		{"restoredFromCompactionId", `5`, true}, {"restoredFromCompactionId", `null`, true},
		{"details", `{"anything":[1,2]}`, true}, {"content", `"c"`, true},
	}
	var rc []ruleCase
	for _, c := range cases {
		comp := withField(t, checkpoint(`[{"role":"user","content":"SNAP"}]`), c.field, c.value)
		tc := ruleCase{
			records: `[{"role":"user","content":"before"},` + comp + `,{"role":"user","content":"after"}]`,
			expect:  `[{"role":"user","content":"before"},{"role":"user","content":"after"}]`,
		}
		what := c.field + " " + c.value
		if c.value == absent {
			what = c.field + " missing"
		}
		if c.valid {
			tc.name = "valid with " + what
			tc.expect = `[{"role":"user","content":"SNAP"},{"role":"user","content":"after"}]`
		} else {
			tc.name = "invalid with " + what
		}
		rc = append(rc, tc)
	}
	runRuleCases(t, rc)
}

// withField returns the JSON record with field set to value, or removed
// when value is "".
func withField(t *testing.T, recordJSON, field, value string) string {
	t.Helper()
	v, err := record.DecodeJSON([]byte(recordJSON))
	require.NoError(t, err)
	m := v.(*record.Map)
	if value == "" {
		kept := m.Members[:0]
		for _, mem := range m.Members {
			if mem.Key != field {
				kept = append(kept, mem)
			}
		}
		m.Members = kept
	} else {
		fv, err := record.DecodeJSON([]byte(value))
		require.NoError(t, err)
		m.Set(field, fv)
	}
	out, err := record.MarshalJSON(m)
	require.NoError(t, err)
	return string(out)
}

func TestBuild_Compaction(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			name: "an invalid compaction after a valid one resets nothing",
			records: `[{"role":"user","content":"a"},` +
				checkpoint(`[{"role":"user","content":"S1"}]`) + `,
				{"role":"user","content":"b"},` +
				checkpoint(`[{"role":"user","content":"S2"}]`, `"handover":null`) + `,
				{"role":"user","content":"c"}]`,
			expect: `[{"role":"user","content":"S1"},{"role":"user","content":"b"},{"role":"user","content":"c"}]`,
		},
		{
			name: "an invalid compaction in a snapshot goes through rules 2 to 6",
			records: `[` + checkpoint(`[`+
				checkpoint(`[{"role":"user","content":"inner"}]`, `"role":"user"`)+`,`+
				checkpoint(`[{"role":"user","content":"inner2"}]`, `"summary":null`, `"role":"user"`)+`,`+
				checkpoint(`[{"role":"user","content":"inner3"}]`, `"summary":null`)+`,
				{"role":"user","content":"S"}]`) + `]`,
			expect: `[` + checkpoint(`[{"role":"user","content":"inner2"}]`, `"summary":null`, `"role":"user"`) + `,
				{"role":"user","content":"S"}]`,
		},
		{
			name: "a snapshot converts its messages by the rules of section 2",
			records: `[{"role":"user","content":"old"},` + checkpoint(`[
				{"role":"custom","content":"ext","display":false,"timestamp":"2024-01-01T00:00:00.5Z"},
				{"role":"bashExecution","command":"ls","output":"o","exitCode":0,"excludeFromContext":true},
				{"role":"bashExecution","command":"pwd","output":"/r","exitCode":0,"timestamp":3},
				{"role":"compactionSummary","summary":"x"},
				{"type":"label","label":"l"},
				{"type":"label","role":"user","content":"labelled"},
				{"kind":"context","role":"user","content":"ctx"},
				{"role":"developer","content":"d"},
				[{"role":"user","content":"nested array"}],
				{"role":"assistant","content":"   "},
				{"role":"system","content":"sys","extra":1}]`) + `]`,
			expect: `[{"role":"user","content":[{"type":"text","text":"ext"}],"timestamp":1704067200500},
				{"role":"user","content":` + shell("<local_shell>\n$ pwd\nexit=0\noutput:\n/r\n</local_shell>") + `,"timestamp":3},
				{"type":"label","role":"user","content":"labelled"},
				{"role":"system","content":"sys","extra":1}]`,
		},
		{
			name: "only messages affects the context: the summary never enters it",
			records: `[` + checkpoint(`[{"role":"user","content":"S"}]`, `"summary":"SUMMARY TEXT"`,
				`"firstKeptIndex":0`, `"audit":{"status":"passed","details":[1]}`, `"handover":{"items":["x"]}`) + `]`,
			expect: `[{"role":"user","content":"S"}]`,
		},
		{
			name: "a compaction resets pairing: a result after it answers only calls in its snapshot",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"x"},{"type":"text","text":"old"}]},
				{"role":"toolResult","toolCallId":"c1","content":"answered before"},` +
				checkpoint(`[{"role":"assistant","content":[{"type":"toolCall","id":"c2","name":"y"}]},
					{"role":"toolResult","toolCallId":"c2","content":"in snapshot"}]`) + `,
				{"role":"toolResult","toolCallId":"c1","content":"late"},
				{"role":"toolResult","toolCallId":"c2","content":"again"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"c2","name":"y"}]},
				{"role":"toolResult","toolCallId":"c2","content":"in snapshot"},
				{"role":"toolResult","toolCallId":"c2","content":"again"}]`,
			dropped: `{"orphan_results":[{"id":"c1","seq":4}]}`,
		},
		{
			name: "a result in a snapshot before the snapshot's call is an orphan",
			records: `[` + checkpoint(`[{"role":"toolResult","toolCallId":"c","content":"r"},
					{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"x"}]}]`) + `,
				{"role":"toolResult","toolCallId":"c","content":"r2"}]`,
			expect: `[]`,
			dropped: `{"unpaired_calls":[{"id":"c","tool":"x","seq":1}],
				"orphan_results":[{"id":"c","seq":1},{"id":"c","seq":2}]}`,
		},
	})
}

func TestBuild_Images(t *testing.T) {
	img := func(data string) string { return `{"type":"image","data":"` + data + `","mimeType":"image/png"}` }
	call := func(id, name string) string {
		return `{"role":"assistant","content":[{"type":"toolCall","id":"` + id + `","name":"` + name + `","arguments":{}}]}`
	}
	result := func(id, content string) string {
		return `{"role":"toolResult","toolCallId":"` + id + `","toolName":"any","content":` + content +
			`,"isError":false,"details":{"n":9007199254740993}}`
	}
	runRuleCases(t, []ruleCase{
		{
			name: "configured browser tools replace the default",
			opt:  Options{BrowserTools: []string{"web"}},
			records: `[` + call("w1", "web") + `,` + result("w1", `[`+img("A")+`]`) + `,
				` + call("b1", "browser_use") + `,` + result("b1", `[`+img("B")+`]`) + `,
				` + call("w2", "web") + `,` + result("w2", `[`+img("C")+`]`) + `]`,
			expect: `[` + call("w1", "web") + `,` + result("w1", `[`+omitted+`]`) + `,
				` + call("b1", "browser_use") + `,` + result("b1", `[`+img("B")+`]`) + `,
				` + call("w2", "web") + `,` + result("w2", `[`+img("C")+`]`) + `]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "an empty set of browser tools trims nothing",
			opt:  Options{BrowserTools: []string{}},
			records: `[` + call("b1", "browser_use") + `,` + result("b1", `[`+img("A")+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			expect: `[` + call("b1", "browser_use") + `,` + result("b1", `[`+img("A")+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			dropped: `{}`,
		},
		{
			name: "a later browser call with the same id makes an earlier result a browser result",
			records: `[` + call("c1", "bash") + `,` + result("c1", `[`+img("A")+`]`) + `,
				` + call("b1", "browser_use") + `,` + result("b1", `[`+img("B")+`]`) + `,
				` + call("c1", "browser_use") + `]`,
			expect: `[` + call("c1", "bash") + `,` + result("c1", `[`+omitted+`]`) + `,
				` + call("b1", "browser_use") + `,` + result("b1", `[`+img("B")+`]`) + `,
				` + call("c1", "browser_use") + `]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "a later browser call can make an earlier result the latest",
			records: `[` + call("b1", "browser_use") + `,` + result("b1", `[`+img("A")+`]`) + `,
				` + call("c1", "bash") + `,` + result("c1", `[`+img("C")+`]`) + `,
				` + call("c1", "browser_use") + `]`,
			expect: `[` + call("b1", "browser_use") + `,` + result("b1", `[`+omitted+`]`) + `,
				` + call("c1", "bash") + `,` + result("c1", `[`+img("C")+`]`) + `,
				` + call("c1", "browser_use") + `]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "a later browser call whose id has no result yet changes nothing before it",
			records: `[` + call("b1", "browser_use") + `,` + result("b1", `[`+img("A")+`]`) + `,
				` + call("b2", "browser_use") + `]`,
			expect:  `[` + call("b1", "browser_use") + `,` + result("b1", `[`+img("A")+`]`) + `]`,
			dropped: `{"unpaired_calls":[{"id":"b2","tool":"browser_use","seq":3}]}`,
		},
		{
			name: "in a user message, browser tool_result blocks are trimmed and the user's own images stay",
			records: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"},{"type":"tool_use","id":"t2","name":"browser_use"}]},
				{"role":"user","content":[` + img("U") + `,
					{"type":"tool_result","tool_use_id":"t1","content":[` + img("A") + `,{"type":"text","text":"p"}],"is_error":false},
					{"type":"text","text":"look"},
					{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"q"},` + img("B") + `]}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"},{"type":"tool_use","id":"t2","name":"browser_use"}]},
				{"role":"user","content":[` + img("U") + `,
					{"type":"tool_result","tool_use_id":"t1","content":[` + omitted + `,{"type":"text","text":"p"}],"is_error":false},
					{"type":"text","text":"look"},
					{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"q"},` + img("B") + `]}]}]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "a result message after tool_result blocks of the same message order is later",
			records: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"},{"type":"tool_use","id":"t2","name":"browser_use"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":[` + img("B") + `]},
					{"type":"tool_result","tool_use_id":"t1","content":[` + img("A") + `]}]},
				` + call("b3", "browser_use") + `,` + result("b3", `[`+img("C")+`]`) + `]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"},{"type":"tool_use","id":"t2","name":"browser_use"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":[` + omitted + `]},
					{"type":"tool_result","tool_use_id":"t1","content":[` + omitted + `]}]},
				` + call("b3", "browser_use") + `,` + result("b3", `[`+img("C")+`]`) + `]`,
			dropped: `{"images_omitted":2}`,
		},
		{
			name: "image blocks outside a content array do not count and are untouched",
			records: `[` + call("b1", "browser_use") + `,` + result("b1", `[`+img("A")+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", img("B")) + `,
				` + call("b3", "browser_use") + `,` + result("b3", `"data:image/png;base64,AAAA"`) + `,
				{"role":"assistant","content":[{"type":"tool_use","id":"t4","name":"browser_use"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t4","content":` + img("D") + `}]}]`,
			expect: `[` + call("b1", "browser_use") + `,` + result("b1", `[`+img("A")+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", img("B")) + `,
				` + call("b3", "browser_use") + `,` + result("b3", `"data:image/png;base64,AAAA"`) + `,
				{"role":"assistant","content":[{"type":"tool_use","id":"t4","name":"browser_use"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t4","content":` + img("D") + `}]}]`,
			dropped: `{}`,
		},
		{
			name: "images nested deeper than the content array are untouched; only type image is an image",
			records: `[` + call("b1", "browser_use") + `,` + result("b1", `[{"type":"text","text":"t","image":`+img("N")+`},[`+img("M")+`],
					{"type":"Image","data":"X"},{"type":"image_url","image_url":"u"},{"type":"image","source":{"data":"S"}}]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			expect: `[` + call("b1", "browser_use") + `,` + result("b1", `[{"type":"text","text":"t","image":`+img("N")+`},[`+img("M")+`],
					{"type":"Image","data":"X"},{"type":"image_url","image_url":"u"},`+omitted+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "images of assistant messages stay; every image block of an earlier result is counted",
			records: `[{"role":"assistant","content":[{"type":"text","text":"see"},` + img("X") + `,{"type":"toolCall","id":"b1","name":"browser_use"}]},
				` + result("b1", `[`+img("A1")+`,{"type":"text","text":"p"},`+img("A2")+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"see"},` + img("X") + `,{"type":"toolCall","id":"b1","name":"browser_use"}]},
				` + result("b1", `[`+omitted+`,{"type":"text","text":"p"},`+omitted+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			dropped: `{"images_omitted":2}`,
		},
		{
			name: "a tool_result block in an extension message answering a browser call is a browser result",
			records: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"}]},
				{"role":"custom","customType":"relay","content":[{"type":"tool_result","tool_use_id":"t1","content":[` + img("A") + `]},` + img("E") + `]},
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[` + omitted + `]},` + img("E") + `]},
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "tool_calls entries: function.name when it is a string, else name",
			records: `[{"role":"assistant","content":"","tool_calls":[
					{"id":"o1","type":"function","name":"browser_use","function":{"name":"bash"}},
					{"id":"o2","type":"function","name":"browser_use","function":{"name":7}},
					{"id":"o3","name":"browser_use","function":"browser_use"}]},
				{"role":"tool","tool_call_id":"o1","content":[` + img("A") + `]},
				{"role":"tool","tool_call_id":"o2","content":[` + img("B") + `]},
				{"role":"tool","tool_call_id":"o3","content":[` + img("C") + `]}]`,
			expect: `[{"role":"assistant","content":"","tool_calls":[
					{"id":"o1","type":"function","name":"browser_use","function":{"name":"bash"}},
					{"id":"o2","type":"function","name":"browser_use","function":{"name":7}},
					{"id":"o3","name":"browser_use","function":"browser_use"}]},
				{"role":"tool","tool_call_id":"o1","content":[` + img("A") + `]},
				{"role":"tool","tool_call_id":"o2","content":[` + omitted + `]},
				{"role":"tool","tool_call_id":"o3","content":[` + img("C") + `]}]`,
			dropped: `{"images_omitted":1}`,
		},
		{
			name: "orphan browser results neither keep nor lose images, and are not counted",
			records: `[` + result("b1", `[`+img("O")+`]`) + `,` + call("b1", "browser_use") + `,
				` + result("b1", `[`+img("O2")+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("A")+`]`) + `,
				` + result("zz", `[`+img("Z")+`]`) + `]`,
			expect: `[` + call("b2", "browser_use") + `,` + result("b2", `[`+img("A")+`]`) + `]`,
			dropped: `{"unpaired_calls":[{"id":"b1","tool":"browser_use","seq":2}],
				"orphan_results":[{"id":"b1","seq":1},{"id":"b1","seq":3},{"id":"zz","seq":6}]}`,
		},
		{
			name: "of two tool_result blocks for one browser call in a message, the later keeps its images",
			records: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[` + img("A") + `,` + img("A2") + `]},
					{"type":"tool_result","tool_use_id":"t1","content":[` + img("B") + `]}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[` + omitted + `,` + omitted + `]},
					{"type":"tool_result","tool_use_id":"t1","content":[` + img("B") + `]}]}]`,
			dropped: `{"images_omitted":2}`,
		},
		{
			name: "a browser result and an orphan tool_result block in one user message",
			records: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":[` + img("N") + `]},
					{"type":"tool_result","tool_use_id":"t1","content":[` + img("A") + `]},{"type":"text","text":"t"}]},
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			expect: `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"browser_use"}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[` + omitted + `]},{"type":"text","text":"t"}]},
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			dropped: `{"orphan_results":[{"id":"nope","seq":2}],"images_omitted":1}`,
		},
		{
			name: "a snapshot's browser results count with the ones after it",
			records: `[` + call("b0", "browser_use") + `,` + result("b0", `[`+img("OLD")+`]`) + `,` +
				checkpoint(`[`+call("b1", "browser_use")+`,`+result("b1", `[`+img("A")+`]`)+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			expect: `[` + call("b1", "browser_use") + `,` + result("b1", `[`+omitted+`]`) + `,
				` + call("b2", "browser_use") + `,` + result("b2", `[`+img("B")+`]`) + `]`,
			dropped: `{"images_omitted":1}`,
		},
	})
}

func TestBuild_Dropped(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			name:    "an empty session reports empty lists",
			records: `[]`, expect: `[]`,
			dropped: `{"unpaired_calls":[],"orphan_results":[],"images_omitted":0}`,
			exact:   true,
		},
		{
			name: "ids, tools and sequences, in stream order",
			records: `[{"kind":"context","text":"c"},
				{"role":"assistant","content":[{"type":"toolCall","id":"c9","name":"bash"},{"type":"toolCall","name":"read"},
					{"type":"tool_use","id":"c8","name":5},{"type":"text","text":"t"}]},
				{"role":"toolResult","toolCallId":"r0","content":"x"},
				{"role":"assistant","content":"x","tool_calls":[
					{"id":"o1","function":{"name":"f"},"name":"n"},
					{"id":"o2","function":{"name":3},"name":"n2"},
					{"id":"o3","function":{"arguments":"{}"}},
					{"function":{"name":"g"}}]},
				{"role":"toolResult","content":"no id"},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"u9"},{"type":"tool_result"}]}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"t"}]},
				{"role":"assistant","content":"x","tool_calls":[]}]`,
			dropped: `{"unpaired_calls":[{"id":"c9","tool":"bash","seq":2},{"id":"","tool":"read","seq":2},{"id":"c8","tool":"","seq":2},
					{"id":"o1","tool":"f","seq":4},{"id":"o2","tool":"n2","seq":4},{"id":"o3","tool":"","seq":4},{"id":"","tool":"g","seq":4}],
				"orphan_results":[{"id":"r0","seq":3},{"id":"","seq":5},{"id":"u9","seq":6},{"id":"","seq":6}],
				"images_omitted":0}`,
		},
		{
			name: "messages of a snapshot report the compaction's sequence",
			records: `[{"role":"user","content":"a"},` +
				checkpoint(`[{"role":"assistant","content":[{"type":"toolCall","id":"s1","name":"bash"}]},
					{"role":"toolResult","toolCallId":"s0","content":"r"}]`) + `,
				{"role":"assistant","content":[{"type":"toolCall","id":"s2","name":"read"}]}]`,
			expect:  `[]`,
			dropped: `{"unpaired_calls":[{"id":"s1","tool":"bash","seq":2},{"id":"s2","tool":"read","seq":3}],"orphan_results":[{"id":"s0","seq":2}]}`,
		},
		{
			name: "a compaction clears the report",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"old1","name":"bash"}]},
				{"role":"toolResult","toolCallId":"x","content":"r"},` + checkpoint(`[]`) + `,
				{"role":"toolResult","toolCallId":"old1","content":"late"}]`,
			expect:  `[]`,
			dropped: `{"orphan_results":[{"id":"old1","seq":4}]}`,
		},
		{
			name: "a call answered later leaves the report",
			records: `[{"role":"assistant","content":[{"type":"toolCall","id":"p","name":"bash"},{"type":"toolCall","id":"q","name":"bash"}]},
				{"role":"toolResult","toolCallId":"q","content":"r"}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"q","name":"bash"}]},
				{"role":"toolResult","toolCallId":"q","content":"r"}]`,
			dropped: `{"unpaired_calls":[{"id":"p","tool":"bash","seq":1}]}`,
		},
		{
			name: "calls of assistant extension messages are listed; provider-executed calls never are",
			records: `[{"type":"label"},
				{"role":"custom","content":[{"type":"toolCall","id":"v1","name":"read"},{"type":"toolCall","id":"p1","name":"web_search","providerExecuted":true}],
					"details":{"role":"assistant"}},
				{"role":"assistant","content":"x","tool_calls":[{"id":"p2","function":{"name":"code_run"},"providerExecuted":true},{"id":"n2","function":{"name":"bash"}}]},
				{"role":"custom","content":[{"type":"tool_result","tool_use_id":"v1"}],"details":{"role":"assistant"}}]`,
			expect: `[{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search","providerExecuted":true}]},
				{"role":"assistant","content":"x","tool_calls":[{"id":"p2","function":{"name":"code_run"},"providerExecuted":true}]},
				{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"v1"}]}]`,
			dropped: `{"unpaired_calls":[{"id":"v1","tool":"read","seq":2},{"id":"n2","tool":"bash","seq":3}],"orphan_results":[],"images_omitted":0}`,
		},
		{
			name: "records dropped by pass 1 still count in the sequence",
			records: `[{"type":"label"},null,{"role":"custom","content":"c"},
				{"role":"assistant","content":[{"type":"toolCall","id":"k","name":"bash"}]}]`,
			expect:  `[{"role":"user","content":[{"type":"text","text":"c"}]}]`,
			dropped: `{"unpaired_calls":[{"id":"k","tool":"bash","seq":4}]}`,
		},
	})
}

func TestBuild_Values(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			name: "numbers pass through exactly",
			records: `[{"role":"user","content":"n","a":9007199254740993,"b":9223372036854775807,"c":18446744073709551617,
				"d":-9223372036854775808,"e":1.5e3,"f":-0.0,"g":1.0,"h":0.1,"i":123456789012345678901234567890.123456789,
				"j":[1E1,2E-1,3e+2]}]`,
			expect: `[{"role":"user","content":"n","a":9007199254740993,"b":9223372036854775807,"c":18446744073709551617,
				"d":-9223372036854775808,"e":1.5e3,"f":-0.0,"g":1.0,"h":0.1,"i":123456789012345678901234567890.123456789,
				"j":[1E1,2E-1,3e+2]}]`,
			exact: true,
		},
		{
			name:     "a number beyond float64 passes through exactly",
			records:  `[{"role":"user","content":"n","big":1E400,"small":-1E400}]`,
			expect:   `[{"role":"user","content":"n","big":1E400,"small":-1E400}]`,
			exact:    true,
			jsonOnly: true,
		},
		{
			name: "a rewritten message keeps its other members exactly",
			records: `[{"role":"assistant","content":[{"type":"text","text":"t"},{"type":"toolCall","id":"gone","name":"x"}],
				"usage":{"input":9007199254740993,"cost":18446744073709551617},"timestamp":1.5e3}]`,
			expect: `[{"role":"assistant","content":[{"type":"text","text":"t"}],
				"usage":{"input":9007199254740993,"cost":18446744073709551617},"timestamp":1.5e3}]`,
			exact: true,
		},
		{
			name:    "the context is an empty array when every record is dropped",
			records: `[{"kind":"context"},{"role":"assistant","content":""},{"role":"toolResult","toolCallId":"x"}]`,
			expect:  `[]`,
			exact:   true,
		},
	})
}

// TestBuild_MsgpackValues covers values as msgpack decodes them: a float
// holding a whole value is an integer, and a timestamp extension is an
// RFC 3339 string.
func TestBuild_MsgpackValues(t *testing.T) {
	shellRun := func(exitCode any) any {
		return record.NewMap("role", "bashExecution", "command", "x", "output", "o", "exitCode", exitCode, "timestamp", 1.5)
	}
	text := func(code string) any {
		return record.NewMap("role", "user",
			"content", []any{record.NewMap("type", "text", "text", "<local_shell>\n$ x\nexit="+code+"\noutput:\no\n</local_shell>")},
			"timestamp", 1.5)
	}
	snapshot := []any{record.NewMap("role", "user", "content", "S")}
	comp := record.NewMap("type", "compaction", "at", "t", "baseSeq", 2.0, "plannerVersion", float64(1<<60),
		"summaryModelRef", "m", "summary", "s", "qualityAudit", "passed", "messages", snapshot,
		"firstKeptIndex", 0.5, "tokensBefore", 1.0, "tokensAfter", uint64(1<<63))
	records := []any{
		shellRun(3.0), shellRun(-1.0), shellRun(1e20), shellRun(2.5), shellRun(uint64(1 << 63)),
	}
	expect := []any{text("3"), text("-1"), text("100000000000000000000"), text("?"), text("9223372036854775808")}
	t.Run("exit codes", func(t *testing.T) {
		requireRules(t, Options{}, records, expect, nil, false)
	})
	t.Run("a compaction with float integers", func(t *testing.T) {
		requireRules(t, Options{}, append(append([]any{}, records...), comp), snapshot, nil, false)
	})
	t.Run("a msgpack timestamp before 1970 rounds toward the past", func(t *testing.T) {
		// {"role":"custom","content":"c","timestamp":<ext -1: -2 s + 0.5e9 ns>}
		data := []byte{0x83,
			0xa4, 'r', 'o', 'l', 'e', 0xa6, 'c', 'u', 's', 't', 'o', 'm',
			0xa7, 'c', 'o', 'n', 't', 'e', 'n', 't', 0xa1, 'c',
			0xa9, 't', 'i', 'm', 'e', 's', 't', 'a', 'm', 'p',
			0xc7, 12, 0xff, 0x1d, 0xcd, 0x65, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}
		v, err := record.DecodeMsgpack(data)
		require.NoError(t, err)
		want := record.NewMap("role", "user",
			"content", []any{record.NewMap("type", "text", "text", "c")}, "timestamp", int64(-1500))
		requireRules(t, Options{}, []any{v}, []any{want}, nil, false)
	})
}
