package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/spectest"
	"github.com/ctxd/ctxd/pkg/record"
)

// runCmd runs a command line in-process with stdin and returns the exit
// code, standard output and standard error.
func runCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	code := run(context.Background(), e, args)
	return code, out.String(), errOut.String()
}

func decodeOutput(t *testing.T, s string) any {
	t.Helper()
	require.True(t, strings.HasSuffix(s, "\n"), "output ends with a newline")
	v, err := record.DecodeJSON([]byte(s))
	require.NoError(t, err, "output is one JSON value: %q", s)
	return v
}

// Every fixture, as JSON lines and as one JSON array, gives its context.
func TestBuild_Fixtures(t *testing.T) {
	for _, f := range spectest.Cases(t) {
		t.Run(f.Name, func(t *testing.T) {
			var lines, array []byte
			array = append(array, "[\n"...)
			for i, r := range f.Records {
				b, err := record.MarshalJSON(r)
				require.NoError(t, err)
				lines = append(append(lines, b...), '\n')
				if i > 0 {
					array = append(array, ",\n"...)
				}
				array = append(array, b...)
			}
			array = append(array, "\n]\n"...)
			for form, in := range map[string]string{"lines": string(lines), "array": string(array)} {
				code, out, errOut := runCmd(t, in, "build")
				require.Equal(t, 0, code, "%s: %s", form, errOut)
				got := decodeOutput(t, out)
				require.True(t, record.Equal(f.Expect, got), "%s:\nwant %v\n got %s", form, f.Expect, out)
			}
		})
	}
}

func TestBuild_InputForms(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"empty input", "", `[]`},
		{"only white space", " \n\t\r\n", `[]`},
		{"blank lines are skipped", "\n\n{\"role\":\"user\",\"content\":\"a\"}\n\n   \n", `[{"role":"user","content":"a"}]`},
		{"CRLF line ends", "{\"role\":\"user\",\"content\":\"a\"}\r\n{\"role\":\"user\",\"content\":\"b\"}\r\n", `[{"role":"user","content":"a"},{"role":"user","content":"b"}]`},
		{"no final newline", `{"role":"user","content":"a"}`, `[{"role":"user","content":"a"}]`},
		{"a null line is a record that contributes nothing", "null\n{\"role\":\"user\",\"content\":\"a\"}\n", `[{"role":"user","content":"a"}]`},
		{"any JSON value is a record", "1\n\"s\"\ntrue\n[1]\n", `[]`},
		{"an array after leading white space", "  \n [ {\"role\":\"user\",\"content\":\"a\"} ] \n", `[{"role":"user","content":"a"}]`},
		{"an empty array", "[]", `[]`},
		{"numbers keep their exact value", `{"role":"user","content":"n","big":18446744073709551617,"f":1.10,"e":1E400}`, `[{"role":"user","content":"n","big":18446744073709551617,"f":1.10,"e":1E400}]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCmd(t, c.in, "build")
			require.Equal(t, 0, code, errOut)
			require.Equal(t, c.want+"\n", out)
			require.Empty(t, errOut)
		})
	}
}

func TestBuild_Dropped(t *testing.T) {
	in := `{"role":"toolResult","toolCallId":"r0","content":"stale"}
{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{}}]}
{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use"}]}
{"role":"toolResult","toolCallId":"b1","content":[{"type":"image","data":"a"}]}
{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use"}]}
{"role":"toolResult","toolCallId":"b2","content":[{"type":"image","data":"b"}]}
`
	code, out, errOut := runCmd(t, in, "build", "--dropped")
	require.Equal(t, 0, code, errOut)
	v := decodeOutput(t, out).(*record.Map)
	require.Equal(t, 2, v.Len())
	msgs, _ := v.Get("messages")
	require.Len(t, msgs, 4)
	d, _ := v.Get("dropped")
	got, err := record.MarshalJSON(d)
	require.NoError(t, err)
	require.JSONEq(t, `{"unpaired_calls":[{"id":"c1","tool":"bash","seq":2}],"orphan_results":[{"id":"r0","seq":1}],"images_omitted":1}`, string(got))

	// The browser tools are configurable.
	code, out, _ = runCmd(t, in, "build", "--dropped", "--browser-tools", "none")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"images_omitted":0`)
}

// Rules 1.1: an assistant extension message is an assistant message whose
// calls pair, and a provider-executed call stays without being reported.
func TestBuild_DroppedRules11(t *testing.T) {
	in := `{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search","providerExecuted":true},{"type":"toolCall","id":"c1","name":"bash"}]}
{"role":"assistant","content":"","tool_calls":[{"id":"p2","function":{"name":"code_run"},"providerExecuted":true},{"id":"p3","function":{"name":"bash"},"providerExecuted":"true"}]}
{"role":"custom","customType":"voice_omni_transcript","content":[{"type":"text","text":"checking"},{"type":"toolCall","id":"v1","name":"read"},{"type":"toolCall","id":"v2","name":"edit"}],"details":{"role":"assistant"},"timestamp":1}
{"role":"custom","content":[{"type":"tool_result","tool_use_id":"c1","content":"not an answer"}],"details":{"role":"assistant"}}
{"role":"toolResult","toolCallId":"v1","content":"ok"}
`
	code, out, errOut := runCmd(t, in, "build", "--dropped")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"messages":[
		{"role":"assistant","content":[{"type":"toolCall","id":"p1","name":"web_search","providerExecuted":true}]},
		{"role":"assistant","content":"","tool_calls":[{"id":"p2","function":{"name":"code_run"},"providerExecuted":true}]},
		{"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"toolCall","id":"v1","name":"read"}],"timestamp":1},
		{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"c1","content":"not an answer"}]},
		{"role":"toolResult","toolCallId":"v1","content":"ok"}],
	"dropped":{"unpaired_calls":[{"id":"c1","tool":"bash","seq":1},{"id":"p3","tool":"bash","seq":2},{"id":"v2","tool":"edit","seq":3}],
		"orphan_results":[],"images_omitted":0}}`, out)
}

// Malformed input names the line, prints nothing to standard output and
// exits 1.
func TestBuild_Malformed(t *testing.T) {
	cases := []struct {
		name, in, line string
	}{
		{"truncated second line", "{\"role\":\"user\"}\n{\"role\":", "line 2,"},
		{"garbage third line", "{}\n\n{\"a\":1} x\n", "line 3,"},
		{"invalid UTF-8", "{\"a\":\"\xff\"}\n", "line 1,"},
		{"control character", "{\"a\":\"\x01\"}\n", "line 1,"},
		{"unclosed array", "[\n{\"a\":1},\n{\"b\":\n", "line 4,"},
		{"bad element of an array", "[\n{\"a\":1},\n{\"b\" 2}\n]", "line 3,"},
		{"text after the array", "[{\"a\":1}] {}", "line 1,"},
		{"trailing comma", "[{\"a\":1},]", "line 1,"},
		{"byte order mark", "\xef\xbb\xbf{\"role\":\"user\"}\n", "line 1, column 1: byte order mark before the JSON text: UTF-8's EF BB BF; remove it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCmd(t, c.in, "build")
			require.Equal(t, 1, code)
			require.Empty(t, out)
			require.Contains(t, errOut, c.line)
		})
	}
	code, out, errOut := runCmd(t, `{"pad":"`+strings.Repeat("x", 100)+`"}`, "build", "--max-record-bytes", "50")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "larger than the limit")

	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	code, out, errOut = runCmd(t, "{\"a\":"+deep+"}", "build")
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "nesting")
}

func TestBuild_Files(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.jsonl")
	require.NoError(t, os.WriteFile(p, []byte(`{"role":"user","content":"f"}`+"\n"), 0o644))
	code, out, _ := runCmd(t, "", "build", p)
	require.Equal(t, 0, code)
	require.Equal(t, `[{"role":"user","content":"f"}]`+"\n", out)

	code, out, _ = runCmd(t, `{"role":"user","content":"stdin"}`, "build", "-")
	require.Equal(t, 0, code)
	require.Contains(t, out, "stdin")

	code, out, errOut := runCmd(t, "", "build", filepath.Join(dir, "missing.jsonl"))
	require.Equal(t, 1, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "missing.jsonl")

	code, _, _ = runCmd(t, "", "build", p, p)
	require.Equal(t, 2, code)

	// The example shipped in the repository builds.
	code, out, errOut = runCmd(t, "", "build", "../../examples/session.jsonl")
	require.Equal(t, 0, code, errOut)
	require.Greater(t, len(decodeOutput(t, out).([]any)), 5)
}

func TestCommandLine(t *testing.T) {
	code, out, _ := runCmd(t, "", "help")
	require.Equal(t, 0, code)
	for _, name := range []string{"serve", "publish", "context", "rejected", "build"} {
		require.Contains(t, out, name)
	}
	code, _, errOut := runCmd(t, "", "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown command "frobnicate"`)

	code, _, errOut = runCmd(t, "", "build", "--no-such-flag")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "no-such-flag")

	code, _, errOut = runCmd(t, "", "serve", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "--sync")
	require.Contains(t, errOut, "CTXD_")

	code, _, errOut = runCmd(t, "", "publish", "--session", "a.b", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "invalid session id")

	code, _, errOut = runCmd(t, "", "publish")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--session is required")

	code, _, errOut = runCmd(t, "", "context", "bad*id")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "invalid session id")

	code, _, errOut = runCmd(t, "", "serve", "--sync", "sometimes")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--sync")
}

func TestParse_FlagsAfterArguments(t *testing.T) {
	e := &env{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}
	fs := newFlags(e, "x", "x", "")
	n := fs.Int("n", 0, "")
	pos, err := parse(e, fs, []string{"a", "--n", "3", "b", "--", "--n"})
	require.NoError(t, err)
	require.Equal(t, 3, *n)
	require.Equal(t, []string{"a", "b", "--n"}, pos)
}

func TestEnvDefaults(t *testing.T) {
	e := &env{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{},
		getenv: func(k string) string { return map[string]string{"CTXD_DATA_DIR": "/d", "CTXD_PORT": "7"}[k] }}
	fs := newFlags(e, "x", "x", "")
	dir := fs.String("data-dir", "", "")
	port := fs.Int("port", 1, "")
	require.NoError(t, envDefaults(fs, e))
	_, err := parse(e, fs, []string{"--port", "9"})
	require.NoError(t, err)
	require.Equal(t, "/d", *dir)
	require.Equal(t, 9, *port, "the command line wins over the environment")

	bad := &env{getenv: func(k string) string { return map[string]string{"CTXD_PORT": "x"}[k] }, stderr: &bytes.Buffer{}}
	fs = newFlags(bad, "x", "x", "")
	fs.Int("port", 1, "")
	require.ErrorContains(t, envDefaults(fs, bad), "CTXD_PORT")
}
