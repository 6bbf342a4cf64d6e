package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/importer"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

const samples = "../../pkg/importer/testdata/"

// importServer starts an embedded server with the TRANSCRIPTS stream and
// returns its URL and a JetStream client.
func importServer(t testing.TB, configure ...func(*natsd.Server)) (string, jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := natstest.Start(t, configure...)
	js, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = bus.EnsureStream(ctx, js, def)
	require.NoError(t, err)
	return url, js
}

// stored returns the Nats-Msg-Id of every record stored on a session's
// subject, in stream order, and the records.
func stored(t *testing.T, js jetstream.JetStream, session string) ([]string, []any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, "TRANSCRIPTS", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"transcripts." + session}})
	require.NoError(t, err)
	defer func() {
		// Tests that poll would otherwise reach the server's consumer limit.
		if name := cons.CachedInfo().Name; name != "" {
			js.DeleteConsumer(context.WithoutCancel(ctx), "TRANSCRIPTS", name)
		}
	}()
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	var ids []string
	var recs []any
	for left := info.NumPending; left > 0; {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		require.NoError(t, err)
		ids = append(ids, msg.Headers().Get(jetstream.MsgIDHeader))
		v, err := record.Decoder{MaxBytes: 64 << 20}.Decode(msg.Data())
		require.NoError(t, err)
		recs = append(recs, v)
		meta, err := msg.Metadata()
		require.NoError(t, err)
		left = meta.NumPending
	}
	return ids, recs
}

func requireUnique(t *testing.T, ids []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, id := range ids {
		require.NotEmpty(t, id)
		require.False(t, seen[id], "record %s stored twice", id)
		seen[id] = true
	}
}

// The printed records are what ctxd build reads: the pipe of docs/IMPORT.md.
func TestImport_PrintToBuild(t *testing.T) {
	code, out, errOut := runCmd(t, "", "import", "--from", "pi", "--print", samples+"pi/agent-sessions-pi-small.jsonl")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 9, strings.Count(out, "\n"))
	require.Contains(t, errOut, "pi/agent-sessions-pi-small.jsonl: pi, session 019e19b4-eb48-746a-aa6b-8dfcfa37954b: 9 records printed")
	code, ctx, errOut := runCmd(t, out, "build", "--dropped")
	require.Equal(t, 0, code, errOut)
	got := decodeOutput(t, ctx).(*record.Map)
	msgs, _ := got.Get("messages")
	require.Len(t, msgs, 5, "the latest compaction's summary and kept messages, then what followed")
}

func TestImport_CommandLine(t *testing.T) {
	file := samples + "pi/session-01.jsonl"
	cases := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"--from is required", []string{"import", "--print", file}, 2, "--from is required"},
		{"an unknown format", []string{"import", "--from", "cursor", file}, 2, "want one of claude-code, codex, pi, gemini, openhands, auto"},
		{"no file", []string{"import", "--from", "pi"}, 2, "at least one FILE"},
		{"a bad session", []string{"import", "--from", "pi", "--session", "a.b", "--print", file}, 2, "invalid session id"},
		{"a missing file", []string{"import", "--from", "pi", "--print", "nope.jsonl"}, 1, "nope.jsonl"},
		{"the wrong format names the file and line", []string{"import", "--from", "codex", "--print", file}, 1, "session-01.jsonl: line 1: not a transcript of this format (codex)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := runCmd(t, "", c.args...)
			require.Equal(t, c.code, code, errOut)
			require.Contains(t, errOut, c.err)
		})
	}
	t.Run("auto says what it detected", func(t *testing.T) {
		code, _, errOut := runCmd(t, "", "import", "--from", "auto", "--print", samples+"openhands/software-agent-sdk-v1_49_4_mcp")
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, "openhands (detected), session software-agent-sdk-v1_49_4_mcp: 11 records printed")
	})
	t.Run("standard input", func(t *testing.T) {
		code, out, errOut := runCmd(t, mustRead(t, file), "import", "--from", "pi", "--print", "-")
		require.Equal(t, 0, code, errOut)
		require.Equal(t, 6, strings.Count(out, "\n"))
	})
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// Importing a file twice, and a file that grew, stores each record once:
// the second import reads what the session holds and sends nothing it
// already has, whatever the server's duplicate window.
func TestImport_Idempotent(t *testing.T) {
	url, js := importServer(t)
	const session = "cfa1e878-62b5-4e40-b281-bbf9b250d766"
	full := mustRead(t, samples+"claude-code/full-session-three.jsonl")
	lines := strings.SplitAfter(full, "\n")
	file := filepath.Join(t.TempDir(), "full-session-three.jsonl")

	// The first half, then the whole file, then the whole file again.
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines[:len(lines)/2], "")), 0o644))
	code, out, errOut := runCmd(t, "", "import", "--nats", url, "--from", "claude-code", file)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^`+session+` \d+\n$`, out)
	half, _ := stored(t, js, session)
	require.NotEmpty(t, half)

	require.NoError(t, os.WriteFile(file, []byte(full), 0o644))
	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "claude-code", file)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "49 records, "+itoa(49-len(half))+" published, "+itoa(len(half))+" already in the stream")

	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "claude-code", file)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "49 records, 0 published, 49 already in the stream")

	ids, recs := stored(t, js, session)
	require.Len(t, ids, 49)
	requireUnique(t, ids)
	require.Equal(t, half, ids[:len(half)], "the records of the first import stay first")

	// The stream holds exactly what --print gives.
	code, printed, errOut := runCmd(t, "", "import", "--from", "claude-code", "--print", file)
	require.Equal(t, 0, code, errOut)
	var want []any
	for _, line := range strings.Split(strings.TrimSpace(printed), "\n") {
		v, err := record.DecodeJSON([]byte(line))
		require.NoError(t, err)
		want = append(want, v)
	}
	require.True(t, record.Equal(want, recs), "the stream holds the printed records, in order")
}

func itoa(n int) string {
	b, _ := record.MarshalJSON(int64(n))
	return string(b)
}

// Several files into one --session; a subagent goes to its own session;
// an OpenHands directory is one conversation.
func TestImport_Sessions(t *testing.T) {
	url, js := importServer(t)
	dir := samples + "claude-code/"
	code, out, errOut := runCmd(t, "", "import", "--nats", url, "--from", "auto", "--session", "merged",
		dir+"dag_compact_after_rewind.jsonl", dir+"full-session-two.jsonl")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 2, strings.Count(out, "merged "))
	require.Contains(t, errOut, "full-session-two.jsonl: warning: session merged holds 9 records imported from claude-code files that this file does not produce: another file's")
	ids, _ := stored(t, js, "merged")
	require.Len(t, ids, 9+35)
	requireUnique(t, ids)

	code, out, errOut = runCmd(t, "", "import", "--nats", url, "--from", "claude-code",
		dir+"ef958aa1-0e93-49f0-bb71-150f63befcd1/subagents/agent-aef063ba534d73153.jsonl",
		samples+"openhands/software-agent-sdk-v1_49_4_mcp")
	require.Equal(t, 1, code, "an OpenHands directory is not a claude-code file")
	require.Contains(t, errOut, "software-agent-sdk-v1_49_4_mcp: a directory")
	require.Contains(t, out, "ef958aa1-0e93-49f0-bb71-150f63befcd1_agent-aef063ba534d73153 ")
}

// A record larger than the server's max payload is never cut: the file's
// session is not published, the error names the file, line and size, and
// the other files go on.
func TestImport_RecordTooLarge(t *testing.T) {
	url, js := importServer(t, func(s *natsd.Server) { s.MaxPayload = 1000000 })
	big := samples + "claude-code/0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl"
	code, out, errOut := runCmd(t, "", "import", "--nats", url, "--from", "auto", big, samples+"pi/session-01.jsonl")
	require.Equal(t, 1, code, errOut)
	require.Regexp(t, `0d3a8e6f-290f-4105-a327-a2496e5e2a83\.jsonl: line \d+: a user record of 104\d{4} bytes; the server accepts at most 1000000 \(its max_payload\)`, errOut)
	require.Contains(t, errOut, "nothing of session 0d3a8e6f-290f-4105-a327-a2496e5e2a83 was published")
	require.Contains(t, errOut, "1 of 2 files not imported")
	ids, _ := stored(t, js, "0d3a8e6f-290f-4105-a327-a2496e5e2a83")
	require.Empty(t, ids)
	require.Contains(t, out, "019e963d-6bd6-7ade-8a49-256ac3391bdd ", "the other file is imported")

	// With the embedded server's default (8 MiB) the same file imports whole.
	url, js = importServer(t)
	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "claude-code", big)
	require.Equal(t, 0, code, errOut)
	ids, recs := stored(t, js, "0d3a8e6f-290f-4105-a327-a2496e5e2a83")
	require.Len(t, ids, 56)
	var body bytes.Buffer
	for _, r := range recs {
		b, err := record.MarshalJSON(r)
		require.NoError(t, err)
		body.Write(b)
	}
	require.Greater(t, body.Len(), 1<<20)
}

// A record too large fails its session only: the file's other sessions
// (a subagent's) are published.
func TestImport_RecordTooLargeFailsItsSessionOnly(t *testing.T) {
	url, js := importServer(t, func(s *natsd.Server) { s.MaxPayload = 100000 })
	big := strings.Repeat("x", 200000)
	lines := []string{
		`{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"main-s","message":{"role":"user","content":"hi"}}`,
		`{"type":"user","uuid":"s1","parentUuid":null,"isSidechain":true,"agentId":"a1","sessionId":"main-s","message":{"role":"user","content":"task"}}`,
		`{"type":"assistant","uuid":"s2","parentUuid":"s1","isSidechain":true,"agentId":"a1","sessionId":"main-s","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"done"}]}}`,
		`{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"main-s","message":{"id":"m2","role":"assistant","content":[{"type":"text","text":"` + big + `"}]}}`,
	}
	file := filepath.Join(t.TempDir(), "main-s.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	code, out, errOut := runCmd(t, "", "import", "--nats", url, "--from", "claude-code", file)
	require.Equal(t, 1, code, errOut)
	require.Regexp(t, `main-s\.jsonl: line 4: an assistant record of 2000\d\d bytes; the server accepts at most 100000 \(its max_payload\)`, errOut)
	require.Contains(t, errOut, "nothing of session main-s was published")
	ids, _ := stored(t, js, "main-s")
	require.Empty(t, ids)
	require.Contains(t, out, "main-s_agent-a1 ")
	ids, _ = stored(t, js, "main-s_agent-a1")
	require.Len(t, ids, 2, "the subagent's session is published")
}

// A stream that stores without acknowledging: the import fails after a
// while, naming the record, instead of waiting forever.
func TestImport_NoAcknowledgement(t *testing.T) {
	url := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	def.NoAck = true
	_, err = js.CreateStream(context.Background(), def)
	require.NoError(t, err)

	importAckWait = 500 * time.Millisecond
	t.Cleanup(func() { importAckWait = 0 })
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCmd(t, "", "import", "--nats", url, "--from", "pi", samples+"pi/session-01.jsonl")
		done <- result{code, out, errOut}
	}()
	select {
	case r := <-done:
		require.Equal(t, 1, r.code, r.errOut)
		require.Regexp(t, `session-01\.jsonl: line \d+: record not stored: no acknowledgement in 500ms; it and the records after it may be stored or not`, r.errOut)
	case <-time.After(20 * time.Second):
		t.Fatal("ctxd import still waits for an acknowledgement after 20s")
	}
}

// writePi writes a pi session of n user messages, the one at big of size
// bytes, the others short, and returns the path.
func writePi(t *testing.T, n, big, size int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"type":"session","version":3,"id":"0199d1a4-0000-7000-8000-000000000001","timestamp":"2026-01-02T03:04:05.000Z","cwd":"/tmp"}` + "\n")
	parent := "null"
	for i := range n {
		text := fmt.Sprintf("message %d", i)
		if i == big {
			text = strings.Repeat("x", size)
		}
		id := fmt.Sprintf("%08x", i+1)
		fmt.Fprintf(&b, `{"type":"message","id":%q,"parentId":%s,"timestamp":"2026-01-02T03:04:%02d.000Z","message":{"role":"user","content":[{"type":"text","text":%q}],"timestamp":%d}}`+"\n",
			id, parent, i%60, text, 1767323045000+i)
		parent = strconv.Quote(id)
	}
	path := filepath.Join(t.TempDir(), "session.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return path
}

// decodeLines decodes JSON lines, the output of import --print.
func decodeLines(t *testing.T, s string) []any {
	t.Helper()
	var vs []any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		v, err := record.DecodeJSON([]byte(line))
		require.NoError(t, err)
		vs = append(vs, v)
	}
	return vs
}

// requireSubsequence checks that got holds records of want, in want's
// order: perhaps not all of them, never one out of its place.
func requireSubsequence(t *testing.T, want, got []any) {
	t.Helper()
	i := 0
	for n, g := range got {
		for i < len(want) && !record.Equal(want[i], g) {
			i++
		}
		require.Less(t, i, len(want), "stored record %d is out of the file's order", n)
		i++
	}
}

// A record the server refuses in the middle of a session (here the
// stream's max_bytes, with discard new, reached by a large record while
// the smaller ones after it fit), then the limit raised and the file
// imported again: the stream holds the file's records in order, or the
// import refuses, naming the session and the record; the session is never
// stored out of order silently.
func TestImport_FailureInTheMiddle(t *testing.T) {
	ctx := context.Background()
	const session = "middle"
	file := writePi(t, 60, 30, 20000)
	prefix := writePi(t, 30, -1, 0) // the records before the large one
	code, printed, errOut := runCmd(t, "", "import", "--from", "pi", "--print", file)
	require.Equal(t, 0, code, errOut)
	want := decodeLines(t, printed)

	// What the records before the large one take in the stream.
	url, js := importServer(t)
	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "pi", "--session", session, prefix)
	require.Equal(t, 0, code, errOut)
	st, err := js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	before := st.CachedInfo().State.Bytes
	require.NotZero(t, before)

	// The stream takes them and 10000 bytes more.
	url = natstest.Start(t)
	js, err = jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	def.MaxBytes, def.Discard = int64(before)+10000, jetstream.DiscardNew
	_, err = js.CreateStream(ctx, def)
	require.NoError(t, err)
	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "pi", "--session", session, file)
	require.Equal(t, 1, code, errOut)
	require.Regexp(t, `session\.jsonl: line 32: record not stored: .*maximum bytes.*; 29 records after it were stored all the same: session middle lacks it`, errOut)
	_, recs := stored(t, js, session)
	requireSubsequence(t, want, recs)

	def.MaxBytes = -1
	_, err = js.UpdateStream(ctx, def)
	require.NoError(t, err)
	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "pi", "--session", session, file)
	ids, recs := stored(t, js, session)
	requireUnique(t, ids)
	requireSubsequence(t, want, recs)
	if code == 0 {
		require.True(t, record.Equal(want, recs), "the stream holds the file's records in its order")
		return
	}
	require.Regexp(t, `session\.jsonl: session middle lacks line 32 .*but holds records after it`, errOut)
}

// Records a stream limit deleted (a stream may have limits with ctxd
// serve --allow-stream-limits; here max_msgs_per_subject) are missing
// from the session, before the ones kept: importing the file again, past
// the stream's duplicate window, would store them after those, out of
// order. The import refuses, naming the session and the first record
// missing, and publishes nothing.
func TestImport_LimitDeleted(t *testing.T) {
	ctx := context.Background()
	url := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	def.MaxMsgsPerSubject, def.Duplicates = 5, 100*time.Millisecond
	_, err = js.CreateStream(ctx, def)
	require.NoError(t, err)
	file := samples + "pi/agent-sessions-pi-small.jsonl"
	const session = "019e19b4-eb48-746a-aa6b-8dfcfa37954b"
	code, _, errOut := runCmd(t, "", "import", "--nats", url, "--from", "pi", file)
	require.Equal(t, 0, code, errOut)
	kept, _ := stored(t, js, session)
	require.Len(t, kept, 5, "the limit deleted the first 4 of 9")

	time.Sleep(200 * time.Millisecond) // past the duplicate window
	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "pi", file)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "agent-sessions-pi-small.jsonl: session "+session+" lacks line 1 (record 1 of 9) but holds records after it")
	ids, _ := stored(t, js, session)
	require.Equal(t, kept, ids, "nothing published")
}

// The records a session holds of a file must be the file's first ones, in
// order, whatever else the session holds.
func TestStoredPrefix(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	cases := []struct {
		stored []string
		n      int
		bad    *orderError
	}{
		{nil, 0, nil},
		{[]string{"a", "b"}, 2, nil},
		{[]string{"x", "a", "y", "b", "c", "d", "z"}, 4, nil},
		{[]string{"b", "c"}, 0, &orderError{want: 0, got: 1}},
		{[]string{"a", "c", "d"}, 0, &orderError{want: 1, got: 2}},
		{[]string{"a", "b", "a"}, 0, &orderError{want: 2, got: 0}},
	}
	for _, c := range cases {
		n, _, _, bad := storedPrefix(c.stored, ids, "")
		require.Equal(t, c.n, n, "%v", c.stored)
		require.Equal(t, c.bad, bad, "%v", c.stored)
	}

	// The ids with the import's prefix that the file does not produce.
	n, abandoned, last, bad := storedPrefix([]string{"p:a", "p:x", "q:y", "p:b", "p:z"}, []string{"p:a", "p:b", "p:c"}, "p:")
	require.Nil(t, bad)
	require.Equal(t, 2, n)
	require.Equal(t, 2, abandoned)
	require.Equal(t, "z", last)

	// A rewind compaction repaired the ones before it.
	n, abandoned, last, bad = storedPrefix([]string{"p:a", "p:x", "p:rewind:x", "p:b", "p:y"}, []string{"p:a", "p:b", "p:c"}, "p:")
	require.Nil(t, bad)
	require.Equal(t, 2, n)
	require.Equal(t, 1, abandoned)
	require.Equal(t, "y", last)
	_, abandoned, last, _ = storedPrefix([]string{"p:a", "p:x", "p:rewind:x", "p:b"}, []string{"p:a", "p:b", "p:c"}, "p:")
	require.Equal(t, 0, abandoned)
	require.Equal(t, "", last)

	// A rewind compaction to the file's first record, then the file back
	// to the records the session holds before it: its context lacks them.
	p, bad := storedState([]string{"p:a", "p:b", "p:rewind:1@2"}, []string{"p:a", "p:b"}, "p:")
	require.Nil(t, bad)
	require.Equal(t, prefixState{n: 2, context: 1}, p)
	p, _ = storedState([]string{"p:a", "p:b", "p:rewind:1@2", "p:c"}, []string{"p:a", "p:c"}, "p:")
	require.Equal(t, prefixState{n: 2, context: 2}, p)
}

// A file rewound after it was imported (here: cut back to its first
// half): the records of the abandoned branch stay in the session, and the
// import says how many there are.
func TestImport_AbandonedBranch(t *testing.T) {
	url, js := importServer(t)
	const session = "cfa1e878-62b5-4e40-b281-bbf9b250d766"
	full := mustRead(t, samples+"claude-code/full-session-three.jsonl")
	lines := strings.SplitAfter(full, "\n")
	file := filepath.Join(t.TempDir(), "full-session-three.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(full), 0o644))
	code, _, errOut := runCmd(t, "", "import", "--nats", url, "--from", "claude-code", file)
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, errOut, "warning")

	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines[:len(lines)/2], "")), 0o644))
	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "claude-code", file)
	require.Equal(t, 0, code, errOut)
	half, _ := stored(t, js, session)
	require.Len(t, half, 49)
	code, printed, _ := runCmd(t, "", "import", "--from", "claude-code", "--print", file)
	require.Equal(t, 0, code)
	n := strings.Count(printed, "\n")
	require.Contains(t, errOut, fmt.Sprintf("%d records, 0 published, %d already in the stream", n, n))
	require.Contains(t, errOut, fmt.Sprintf("full-session-three.jsonl: warning: session %s holds %d records imported from this file that it no longer produces", session, 49-n))
}

// A stream's max_msg_size counts a message's headers: a record that fits
// it only without the import's headers is refused before anything of its
// session is published, like a record over it.
func TestImport_RecordOverMaxMsgSizeWithHeaders(t *testing.T) {
	ctx := context.Background()
	file := writePi(t, 60, 30, 5000)
	code, printed, errOut := runCmd(t, "", "import", "--from", "pi", "--print", file)
	require.Equal(t, 0, code, errOut)
	size := len(strings.Split(printed, "\n")[31]) // line 32's record
	url := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	def.MaxMsgSize = int32(size + 10)
	_, err = js.CreateStream(ctx, def)
	require.NoError(t, err)

	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "pi", "--session", "big", file)
	require.Equal(t, 1, code, errOut)
	require.Regexp(t, fmt.Sprintf(`session\.jsonl: line 32: a user record of %d bytes, \d+ with its headers; stream TRANSCRIPTS stores at most %d \(its max_msg_size\)`, size, size+10), errOut)
	require.Contains(t, errOut, "nothing of session big was published")
	ids, _ := stored(t, js, "big")
	require.Empty(t, ids)
}

// The encoder hands the publisher each record's JSON in order, made
// ahead; a record asked for out of turn is made on the spot; stopping it
// early leaves no goroutine behind.
func TestEncodeAhead(t *testing.T) {
	ts, err := importer.ParseBytes(importer.ClaudeCode, "f.jsonl", []byte(mustRead(t, samples+"claude-code/0d3a8e6f-290f-4105-a327-a2496e5e2a83.jsonl")))
	require.NoError(t, err)
	recs := ts[0].Records
	require.Greater(t, len(recs), 10)
	want := func(i int) string {
		b, err := recs[i].JSON()
		require.NoError(t, err)
		return string(b)
	}
	for _, ahead := range []int{1, 4, 1000} {
		enc := encodeAhead(context.Background(), recs, ahead)
		for i := range recs {
			b, err := enc.next(i)
			require.NoError(t, err)
			require.Equal(t, want(i), string(b), "record %d, %d ahead", i, ahead)
		}
		enc.stop()
	}

	enc := encodeAhead(context.Background(), recs, 2)
	b, err := enc.next(5)
	require.NoError(t, err)
	require.Equal(t, want(5), string(b), "out of turn")
	b, err = enc.next(0)
	require.NoError(t, err)
	require.Equal(t, want(0), string(b))
	enc.stop() // while the encoder waits to hand over more

	ctx, cancel := context.WithCancel(context.Background())
	enc = encodeAhead(ctx, recs, 1)
	cancel()
	enc.stop()
	for i := range 3 { // nothing made: the caller's context ends the wait
		if _, err := enc.next(i); err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
	}
}

// Files are converted one ahead of the one published or printed: the
// output and the reports still come file by file, in the order given, and
// a file that fails leaves the others alone.
func TestImport_FilesInOrder(t *testing.T) {
	files := []string{
		samples + "pi/session-01.jsonl",
		"nope.jsonl",
		samples + "claude-code/full-session-two.jsonl",
		samples + "pi/before-compaction.jsonl",
		samples + "codex/agent-sessions-codex-small.jsonl",
		samples + "gemini/session-2025-10-27T19-55-981c87cb.json",
		samples + "claude-code/dag_compact_after_rewind.jsonl",
	}
	var want strings.Builder
	for _, f := range files {
		if f == "nope.jsonl" {
			continue
		}
		code, out, errOut := runCmd(t, "", "import", "--from", "auto", "--print", f)
		require.Equal(t, 0, code, errOut)
		want.WriteString(out)
	}
	code, out, errOut := runCmd(t, "", append([]string{"import", "--from", "auto", "--print"}, files...)...)
	require.Equal(t, 1, code, errOut)
	require.Equal(t, want.String(), out)
	require.Contains(t, errOut, "1 of 7 files not imported")
	at := -1
	for _, f := range files {
		i := strings.Index(errOut, f+":")
		require.Greater(t, i, at, "the report of %s comes after the one before", f)
		at = i
	}

	// Stopped while a converted file waits to be taken: stop releases it
	// and returns once the converter has.
	ctx, cancel := context.WithCancel(context.Background())
	conv, stop := convertAhead(ctx, &env{}, importer.Parser{}, importer.Pi, []string{files[0], files[0], files[0]})
	c := <-conv
	require.NoError(t, c.err)
	c.release()
	cancel()
	stop()
}

// On a stream partitioned between two imports, the second finds the
// records of the first (on transcripts.<session>) and publishes only the
// rest (stored on transcripts.<k>.<session>); a third publishes nothing.
func TestImport_Partitioned(t *testing.T) {
	url, js := importServer(t)
	const session = "cfa1e878-62b5-4e40-b281-bbf9b250d766"
	full := mustRead(t, samples+"claude-code/full-session-three.jsonl")
	lines := strings.SplitAfter(full, "\n")
	file := filepath.Join(t.TempDir(), "full-session-three.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines[:len(lines)/2], "")), 0o644))
	code, _, errOut := runCmd(t, "", "import", "--nats", url, "--from", "claude-code", file)
	require.Equal(t, 0, code, errOut)
	half, _ := stored(t, js, session)
	require.NotEmpty(t, half)

	code, out, errOut := runCmd(t, "", "partition", "--nats", url, "--partitions", "16")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "16 partitions")

	require.NoError(t, os.WriteFile(file, []byte(full), 0o644))
	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "claude-code", file)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "49 records, "+itoa(49-len(half))+" published, "+itoa(len(half))+" already in the stream")
	code, _, errOut = runCmd(t, "", "import", "--nats", url, "--from", "claude-code", file)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "49 records, 0 published, 49 already in the stream")
	moved, _ := stored(t, js, fmt.Sprintf("%d.%s", subject.Partition(session, 16), session))
	require.Len(t, moved, 49-len(half))
}

// A line that does not decode never takes the records around it out of
// an import that succeeds: invalid UTF-8 is replaced and said, any other
// fails the file naming the line, and so does a line longer than
// --max-line, as soon as it is read.
func TestImport_BadLines(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, data, 0o644))
		return path
	}
	good := []byte(mustRead(t, samples+"claude-code/full-session-two.jsonl"))
	lines := bytes.Split(good, []byte("\n"))
	at := bytes.Index(lines[16], []byte(`"text":"`)) + len(`"text":"`)
	lines[16] = append(append(append([]byte{}, lines[16][:at]...), 0xff), lines[16][at:]...)
	utf := write("utf8.jsonl", bytes.Join(lines, []byte("\n")))
	lines[16] = []byte(`{"type":"user","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`)
	deep := write("deep.jsonl", bytes.Join(lines, []byte("\n")))
	deepFirst := write("deep-first.jsonl", bytes.Join(lines[16:], []byte("\n")))
	long := write("long.jsonl", good)

	t.Run("invalid UTF-8 is replaced, and the records around it kept", func(t *testing.T) {
		for _, from := range []string{"claude-code", "auto"} {
			code, out, errOut := runCmd(t, "", "import", "--from", from, "--print", utf)
			require.Equal(t, 0, code, errOut)
			require.Equal(t, 35, strings.Count(out, "\n"), errOut)
			require.Contains(t, errOut, "35 records printed")
			require.Contains(t, errOut, "line 17: invalid UTF-8 replaced with U+FFFD: 1 byte, at byte ")
			require.NotContains(t, errOut, "abandoned")
			require.Contains(t, out, "\uFFFDI can see")
		}
	})
	cases := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"a line nested too deep fails the file", []string{"--from", "claude-code", deep}, 1, "deep.jsonl: line 17: does not decode: json at byte 146: nesting deeper than the limit"},
		{"auto names it too", []string{"--from", "auto", deep}, 1, "deep.jsonl: line 17: does not decode"},
		{"auto names a first line nested too deep", []string{"--from", "auto", deepFirst}, 1, "deep-first.jsonl: line 1: does not decode: json at byte 146: nesting deeper than the limit"},
		{"an input without newlines", []string{"--from", "auto", "/dev/zero"}, 1, fmt.Sprintf("/dev/zero: line 1: line too long: more than %d bytes (--max-line)", importer.DefaultMaxLine)},
		{"a line longer than --max-line", []string{"--from", "claude-code", "--max-line", "4096", long}, 1, "long.jsonl: line 10: line too long: more than 4096 bytes (--max-line)"},
		{"--max-line must be positive", []string{"--from", "pi", "--max-line", "0", long}, 2, "--max-line: 0: want 1 or more bytes"},
		{"a file larger than --max-file", []string{"--from", "claude-code", "--max-file", "4096", long}, 1, "long.jsonl: file too large: more than 4096 bytes (--max-file)"},
		{"--max-file must be positive", []string{"--from", "pi", "--max-file", "0", long}, 2, "--max-file: 0: want 1 or more bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCmd(t, "", append([]string{"import", "--print"}, c.args...)...)
			require.Equal(t, c.code, code, errOut)
			require.Contains(t, errOut, c.err)
			require.Empty(t, out)
		})
	}
	t.Run("the other files go on", func(t *testing.T) {
		code, out, errOut := runCmd(t, "", "import", "--from", "auto", "--print", deep, utf)
		require.Equal(t, 1, code, errOut)
		require.Equal(t, 35, strings.Count(out, "\n"), errOut)
		require.Contains(t, errOut, "deep.jsonl: line 17: does not decode")
		require.Contains(t, errOut, "1 of 2 files not imported")
	})
	t.Run("standard input without newlines", func(t *testing.T) {
		code, _, errOut := runCmd(t, strings.Repeat("x", 5000), "import", "--from", "auto", "--print", "--max-line", "4096", "-")
		require.Equal(t, 1, code, errOut)
		require.Contains(t, errOut, "stdin: line 1: line too long: more than 4096 bytes (--max-line)")
	})
}
