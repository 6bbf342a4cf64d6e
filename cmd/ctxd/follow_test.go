package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/importer"
	"github.com/ctxd/ctxd/pkg/projection"
)

// following is a `ctxd import --follow` running in-process.
type following struct {
	out, errOut *syncBuf
	stop        func() int // interrupts it and returns its exit code
}

func startFollow(t *testing.T, args ...string) *following {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &following{out: &syncBuf{}, errOut: &syncBuf{}}
	e := &env{stdin: strings.NewReader(""), stdout: f.out, stderr: f.errOut, getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() { done <- run(ctx, e, append([]string{"import", "--follow"}, args...)) }()
	var once sync.Once
	code := -1
	f.stop = func() int {
		once.Do(func() {
			cancel()
			code = <-done
		})
		return code
	}
	t.Cleanup(func() { f.stop() })
	return f
}

// contextOf is the model context of a session's stored records: what
// `ctxd context` answers for it.
func contextOf(t *testing.T, js jetstream.JetStream, session string) []any {
	t.Helper()
	_, recs := stored(t, js, session)
	return projection.Build(projection.Numbered(recs), projection.Options{}).Messages
}

// printedContext is the model context of a file imported in one shot.
func printedContext(t *testing.T, format, content string) []any {
	t.Helper()
	return projection.Build(projection.Numbered(printedRecords(t, format, content)), projection.Options{}).Messages
}

// printedRecords are the records `ctxd import --print` makes of content.
func printedRecords(t *testing.T, format, content string) []any {
	t.Helper()
	if content == "" {
		return []any{}
	}
	file := filepath.Join(t.TempDir(), "once.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(content), 0o644))
	code, out, errOut := runCmd(t, "", "import", "--from", format, "--print", file)
	require.Equal(t, 0, code, errOut)
	if out == "" {
		return []any{} // only metadata so far
	}
	return decodeLines(t, out)
}

// followedContext is the model context a follow gives of a file as it
// stands: the one-shot import's records but those the tool may still
// write again (Transcript.Unsettled), which the follow holds back.
func followedContext(t *testing.T, format, content string) []any {
	t.Helper()
	recs := printedRecords(t, format, content)
	if len(recs) > 0 {
		f, err := importer.ParseFormat(format)
		require.NoError(t, err)
		ts, err := importer.Parser{}.ParseBytes(f, "once.jsonl", []byte(content))
		require.NoError(t, err)
		require.Len(t, ts, 1)
		recs = recs[:len(recs)-ts[0].Unsettled]
	}
	return projection.Build(projection.Numbered(recs), projection.Options{}).Messages
}

// waitContext polls until the session's context is want.
func waitContext(t *testing.T, js jetstream.JetStream, f *following, session string, want []any) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := contextOf(t, js, session)
		if reflect.DeepEqual(want, got) {
			require.Equal(t, want, got)
			return
		}
		if time.Now().After(deadline) {
			require.Equal(t, want, got, "the followed session's context; the follower said:\n%s", f.errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func appendFile(t *testing.T, name, s string) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// A followed file grows in steps, a line at times half written: after
// each step the session's context is the one-shot import's of what the
// file holds, and at the end it equals the context of the final file
// imported in one shot into another session.
func TestImportFollow_Grows(t *testing.T) {
	cases := []struct{ format, sample, session string }{
		{"claude-code", "claude-code/full-session-two.jsonl", "8a2518dd-ff41-4d5f-83a1-407b03598cc6"},
		{"codex", "codex/rollout-2025-09-24T20-12-23-01997ea4-a70d-7da3-8c20-c736db82a7c5.jsonl", "01997ea4-a70d-7da3-8c20-c736db82a7c5"},
		{"pi", "pi/agent-sessions-pi-small.jsonl", "019e19b4-eb48-746a-aa6b-8dfcfa37954b"},
		{"gemini", "gemini/agent-sessions-gemini-jsonl_v040.jsonl", "gemini_stage0_jsonl"},
	}
	for _, c := range cases {
		t.Run(c.format, func(t *testing.T) {
			url, js := importServer(t)
			full := mustRead(t, samples+c.sample)
			lines := strings.SplitAfter(full, "\n")
			dir := t.TempDir()
			file := filepath.Join(dir, filepath.Base(c.sample))
			f := startFollow(t, "--nats", url, "--from", c.format, dir)

			steps := 4
			written := 0
			for s := 1; s <= steps; s++ {
				upTo := len(lines) * s / steps
				chunk := strings.Join(lines[written:upTo], "")
				if s < steps && len(chunk) > 10 {
					// Half a line first: it waits for its end.
					appendFile(t, file, chunk[:len(chunk)-5])
					waitContext(t, js, f, c.session, followedContext(t, c.format, strings.Join(lines[:upTo-1], "")))
					chunk = chunk[len(chunk)-5:]
				}
				want := followedContext(t, c.format, strings.Join(lines[:upTo], ""))
				start := time.Now()
				appendFile(t, file, chunk)
				written = upTo
				waitContext(t, js, f, c.session, want)
				t.Logf("step %d: in the context %s after it was written", s, time.Since(start).Round(time.Millisecond))
			}
			require.Equal(t, 0, f.stop(), f.errOut.String())
			require.Contains(t, f.errOut.String(), "stopped following")
			require.Contains(t, f.out.String(), c.session+" ")
			ids, _ := stored(t, js, c.session)
			requireUnique(t, ids)

			code, _, errOut := runCmd(t, "", "import", "--nats", url, "--from", c.format, "--session", "once", file)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, contextOf(t, js, "once"), contextOf(t, js, c.session))
		})
	}
}

// Gemini CLI writes its last model message again whole as its calls,
// results and tokens come: the follow holds it back until the tool writes
// the next message, or the follow stops, so the session gets the version
// with the calls. (Published at once, its first version, without the
// calls, would have stayed, and the result would have answered nothing.)
func TestImportFollow_GeminiMessageWrittenAgain(t *testing.T) {
	url, js := importServer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "session-w.jsonl")
	meta := `{"sessionId":"gemini_again","projectHash":"abc","startTime":"2026-04-29T21:39:22.319Z","lastUpdated":"2026-04-29T21:39:22.319Z","kind":"main"}` + "\n"
	user := `{"id":"u1","timestamp":"2026-04-29T21:39:33.155Z","type":"user","content":[{"text":"List the files."}]}` + "\n"
	text := `{"id":"g1","timestamp":"2026-04-29T21:39:35.125Z","type":"gemini","content":"Let me list the files.","thoughts":[],"model":"gemini-3-flash-preview"}` + "\n"
	calls := `{"id":"g1","timestamp":"2026-04-29T21:39:35.125Z","type":"gemini","content":"Let me list the files.","thoughts":[],"model":"gemini-3-flash-preview","toolCalls":[{"id":"c1","name":"run_shell_command","args":{"command":"ls"},"result":[{"functionResponse":{"id":"c1","name":"run_shell_command","response":{"output":"a.txt"}}}],"status":"success","timestamp":"2026-04-29T21:39:35.364Z"}]}` + "\n"
	next := `{"id":"g2","timestamp":"2026-04-29T21:39:45.996Z","type":"gemini","content":"There is a.txt.","thoughts":[],"model":"gemini-3-flash-preview"}` + "\n"

	require.NoError(t, os.WriteFile(file, []byte(meta+user+text), 0o644))
	f := startFollow(t, "--nats", url, "--from", "gemini", dir)
	waitContext(t, js, f, "gemini_again", printedContext(t, "gemini", meta+user))
	require.Eventually(t, func() bool { return strings.Contains(f.errOut.String(), "1 held back") }, time.Minute, 20*time.Millisecond, f.errOut.String())

	appendFile(t, file, calls+next)
	// g1 with its call and result; g2, the last, held back.
	waitContext(t, js, f, "gemini_again", printedContext(t, "gemini", meta+user+text+calls))
	require.Len(t, contextOf(t, js, "gemini_again"), 3)

	require.Equal(t, 0, f.stop(), f.errOut.String())
	require.Contains(t, f.errOut.String(), "1 held back, published as the follow stopped")
	ids, _ := stored(t, js, "gemini_again")
	requireUnique(t, ids)
	code, _, errOut := runCmd(t, "", "import", "--nats", url, "--from", "gemini", "--session", "once", file)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, contextOf(t, js, "once"), contextOf(t, js, "gemini_again"))
	require.Len(t, contextOf(t, js, "once"), 4)
}

// forkLine is a Claude Code user line, a copy of line with its own uuid,
// whose parent is parent: the tool went on from there.
func forkLine(t *testing.T, line, uuid, parent, text string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(line), &m))
	m["uuid"], m["parentUuid"] = uuid, parent
	m["message"] = map[string]any{"role": "user", "content": text}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return string(b) + "\n"
}

func uuidOf(t *testing.T, line string) string {
	t.Helper()
	var m struct{ UUID string }
	require.NoError(t, json.Unmarshal([]byte(line), &m))
	require.NotEmpty(t, m.UUID)
	return m.UUID
}

func rewinds(ids []string) int {
	n := 0
	for _, id := range ids {
		if strings.Contains(id, ":"+importer.RewindID) {
			n++
		}
	}
	return n
}

// A Claude Code file whose conversation goes on from an earlier line
// (a rewind), then cut back to its first half: each time the session's
// context becomes the one the file's final branch gives, through a
// compaction; the stream keeps every record, and a follower started
// again publishes nothing twice.
func TestImportFollow_Rewind(t *testing.T) {
	url, js := importServer(t)
	const session = "cfa1e878-62b5-4e40-b281-bbf9b250d766"
	full := mustRead(t, samples+"claude-code/full-session-three.jsonl")
	lines := strings.SplitAfter(full, "\n")
	lines = lines[:len(lines)-1] // the empty string after the last newline
	file := filepath.Join(t.TempDir(), "full-session-three.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(full), 0o644))
	f := startFollow(t, "--nats", url, "--from", "claude-code", file)
	waitContext(t, js, f, session, printedContext(t, "claude-code", full))
	ids, _ := stored(t, js, session)
	require.Len(t, ids, 49)
	require.Zero(t, rewinds(ids))

	// The tool goes on from line 20.
	content := full + forkLine(t, lines[0], "f0000000-0000-4000-8000-000000000001", uuidOf(t, lines[19]), "let us try another way")
	appendFile(t, file, content[len(full):])
	waitContext(t, js, f, session, printedContext(t, "claude-code", content))
	ids, _ = stored(t, js, session)
	require.Len(t, ids, 51) // the 49, the compaction, the new line
	require.Equal(t, 1, rewinds(ids))
	require.Contains(t, f.errOut.String(), "rewound: ")
	require.Equal(t, 0, f.stop(), f.errOut.String())

	// Started again after the file grew: what it holds is not sent again.
	grown := content + forkLine(t, lines[0], "f0000000-0000-4000-8000-000000000002", "f0000000-0000-4000-8000-000000000001", "and now?")
	appendFile(t, file, grown[len(content):])
	f = startFollow(t, "--nats", url, "--from", "claude-code", file)
	waitContext(t, js, f, session, printedContext(t, "claude-code", grown))
	ids, _ = stored(t, js, session)
	requireUnique(t, ids)
	require.Len(t, ids, 52)
	require.Equal(t, 1, rewinds(ids))

	// Cut back to its first half: read again from its start.
	half := strings.Join(lines[:len(lines)/2], "")
	require.NoError(t, os.WriteFile(file, []byte(half), 0o644))
	waitContext(t, js, f, session, printedContext(t, "claude-code", half))
	ids, _ = stored(t, js, session)
	requireUnique(t, ids)
	require.Equal(t, 2, rewinds(ids))
	require.Contains(t, f.errOut.String(), "cut shorter")
	require.Equal(t, 0, f.stop(), f.errOut.String())

	code, _, errOut := runCmd(t, "", "import", "--nats", url, "--from", "claude-code", "--session", "once", file)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, contextOf(t, js, "once"), contextOf(t, js, session))
}

// What --follow refuses, and an interrupt: 130 before the stream is
// found, 0 once following.
func TestImportFollow_CommandLine(t *testing.T) {
	file := samples + "pi/session-01.jsonl"
	cases := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"with --print", []string{"--print", file}, 2, "not with --print"},
		{"openhands", []string{"--from", "openhands", samples + "openhands/software-agent-sdk-v1_49_4_mcp"}, 2, "OpenHands"},
		{"standard input", []string{"-"}, 2, "not standard input"},
		{"--session with a directory", []string{"--session", "s", samples + "pi"}, 2, "give one file"},
		{"a missing file", []string{"nope.jsonl"}, 1, "nope.jsonl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"import", "--follow", "--from", "pi"}, c.args...)
			code, _, errOut := runCmd(t, "", args...)
			require.Equal(t, c.code, code, errOut)
			require.Contains(t, errOut, c.err)
		})
	}
	t.Run("interrupted while starting", func(t *testing.T) {
		url, _ := importServer(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out, errOut bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
		require.Equal(t, 130, run(ctx, e, []string{"import", "--follow", "--nats", url, "--from", "pi", file}), errOut.String())
	})
}

// A file that appears in a followed directory is a new session, and a
// file replaced by another (a new inode) is read again from its start.
func TestImportFollow_NewAndReplacedFiles(t *testing.T) {
	url, js := importServer(t)
	dir := t.TempDir()
	first := mustRead(t, samples+"pi/session-01.jsonl")
	second := mustRead(t, samples+"pi/agent-sessions-pi-small.jsonl")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.jsonl"), []byte(first), 0o644))
	f := startFollow(t, "--nats", url, "--from", "pi", dir)
	waitContext(t, js, f, "019e963d-6bd6-7ade-8a49-256ac3391bdd", printedContext(t, "pi", first))

	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "b.jsonl"), []byte(second), 0o644))
	waitContext(t, js, f, "019e19b4-eb48-746a-aa6b-8dfcfa37954b", printedContext(t, "pi", second))

	// a.jsonl replaced by a file holding its first lines and more.
	lines := strings.SplitAfter(first, "\n")
	tmp := filepath.Join(t.TempDir(), "a.jsonl")
	require.NoError(t, os.WriteFile(tmp, []byte(strings.Join(lines[:3], "")), 0o644))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "a.jsonl")))
	require.Eventually(t, func() bool { return strings.Contains(f.errOut.String(), "replaced or cut shorter") }, 2*time.Minute, 50*time.Millisecond)
	require.NoError(t, os.WriteFile(tmp, []byte(first), 0o644))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "a.jsonl")))
	waitContext(t, js, f, "019e963d-6bd6-7ade-8a49-256ac3391bdd", printedContext(t, "pi", first))
	require.Equal(t, 0, f.stop(), f.errOut.String())
	for _, s := range []string{"019e963d-6bd6-7ade-8a49-256ac3391bdd", "019e19b4-eb48-746a-aa6b-8dfcfa37954b"} {
		ids, _ := stored(t, js, s)
		requireUnique(t, ids)
		require.Contains(t, f.out.String(), s+" ")
	}
}

// A followed directory that is missing is said once, not at every look.
func TestFollower_MissingPathSaidOnce(t *testing.T) {
	var errOut syncBuf
	dir := filepath.Join(t.TempDir(), "chats")
	f := &follower{e: &env{stderr: &errOut}, paths: []string{dir}, files: map[string]*followedFile{}}
	for range 3 {
		f.scan(context.Background())
	}
	require.Equal(t, 1, strings.Count(errOut.String(), "no such file"), errOut.String())
}

// A follow reconnects for as long as it takes (nats.go's default gives
// up after about two minutes); one whose connection is closed for good
// stops with an error instead of following on without publishing.
func TestFollower_ConnectionClosed(t *testing.T) {
	url, _ := importServer(t)
	errOut := &syncBuf{}
	e := &env{stdin: strings.NewReader(""), stdout: &syncBuf{}, stderr: errOut, getenv: func(string) string { return "" }}
	nc, err := nats.Connect(url, followConnOptions(e)...)
	require.NoError(t, err)
	require.Equal(t, -1, nc.Opts.MaxReconnect, "reconnects without end")
	f := &follower{e: e, pub: &importPublisher{nc: nc, e: e, ready: make(chan struct{})},
		format: importer.Gemini, interval: 20 * time.Millisecond, paths: []string{t.TempDir()},
		out: bufio.NewWriter(io.Discard), files: map[string]*followedFile{}}
	done := make(chan error, 1)
	go func() { done <- f.run(t.Context()) }()
	time.Sleep(100 * time.Millisecond)
	nc.Close()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "the NATS connection is closed")
	case <-time.After(30 * time.Second):
		t.Fatal("the follow went on with its connection closed")
	}
}
