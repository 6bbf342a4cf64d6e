package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/streams"
)

// syncBuffer is a buffer a command writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// An existing stream that deletes records past a limit is refused, the
// field and the flag named; with --allow-stream-limits ctxd serves on it
// and logs the limit.
func TestServe_StreamLimits(t *testing.T) {
	url := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	def.MaxAge = 24 * time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, def)
	require.NoError(t, err)

	code, _, errOut := runCmd(t, "", "serve", "--nats", url)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "stream TRANSCRIPTS: field max_age is 24h0m0s")
	require.Contains(t, errOut, "--allow-stream-limits")

	serving, stop := context.WithCancel(ctx)
	var out, logs syncBuffer
	done := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &logs, getenv: func(string) string { return "" }}
		done <- run(serving, e, []string{"serve", "--nats", url, "--allow-stream-limits"})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ctxd ready") }, 20*time.Second, 10*time.Millisecond, "stderr: %s", logs.String())
	stop()
	require.Equal(t, 0, <-done, "stderr: %s", logs.String())
	require.Contains(t, logs.String(), "stream limit accepted")
	require.Contains(t, logs.String(), "field=max_age")
}

// ctxd serve --browser-tools places a served Anthropic reply's cache
// breakpoint before the latest screenshot of those tools, as ctxd build
// --browser-tools does with the same records.
func TestServe_BrowserToolsBreakpoint(t *testing.T) {
	url := natstest.Start(t)
	records := strings.Join([]string{
		`{"role":"user","content":"look at the page"}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"s1","name":"screenshot","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"s1","toolName":"screenshot","content":[{"type":"image","data":"iVBORw0K","mimeType":"image/png"}]}`,
		`{"role":"assistant","content":"a login form"}`,
		`{"role":"user","content":"log in"}`,
	}, "\n") + "\n"

	ctx, stop := context.WithCancel(context.Background())
	var out, logs syncBuffer
	done := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &logs, getenv: func(string) string { return "" }}
		done <- run(ctx, e, []string{"serve", "--nats", url, "--browser-tools", "screenshot"})
	}()
	t.Cleanup(func() {
		stop()
		require.Equal(t, 0, <-done, "stderr: %s", logs.String())
	})
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ctxd ready") }, 20*time.Second, 10*time.Millisecond, "stderr: %s", logs.String())

	code, seq, errOut := runCmd(t, records, "publish", "--session", "b1", "--nats", url)
	require.Equal(t, 0, code, errOut)
	code, served, errOut := runCmd(t, "", "context", "b1", "--nats", url, "--format", "anthropic", "--min-seq", strings.TrimSpace(seq))
	require.Equal(t, 0, code, errOut)
	code, built, errOut := runCmd(t, records, "build", "--format", "anthropic", "--browser-tools", "screenshot", "--dropped")
	require.Equal(t, 0, code, errOut)
	code, byDefault, errOut := runCmd(t, records, "build", "--format", "anthropic", "--dropped")
	require.Equal(t, 0, code, errOut)

	breakpoint := func(out string) any {
		m := decodeOutput(t, out).(*record.Map)
		rep, _ := m.Get("render")
		bp, ok := rep.(*record.Map).Get("cache_breakpoint")
		require.True(t, ok, out)
		return bp
	}
	want := breakpoint(built)
	require.False(t, record.Equal(want, breakpoint(byDefault)), "the records place the breakpoint apart from the default browser tools")
	require.True(t, record.Equal(want, breakpoint(served)), "served %s, built %s", served, built)
}

// ctxd serve --cpuprofile FILE profiles the process from start to
// shutdown; a file it cannot create stops it before it starts, naming the
// flag.
func TestServe_CPUProfile(t *testing.T) {
	url := natstest.Start(t)
	code, _, errOut := runCmd(t, "", "serve", "--nats", url, "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.pprof"))
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "--cpuprofile:")

	file := filepath.Join(t.TempDir(), "cpu.pprof")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var out, logs syncBuffer
	done := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &logs, getenv: func(string) string { return "" }}
		done <- run(ctx, e, []string{"serve", "--nats", url, "--cpuprofile", file})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ctxd ready") }, 20*time.Second, 10*time.Millisecond, "stderr: %s", logs.String())
	stop()
	require.Equal(t, 0, <-done, "stderr: %s", logs.String())
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	// A profile is gzipped protocol buffers: written whole at shutdown.
	zr, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	_, err = io.ReadAll(zr)
	require.NoError(t, err, "a whole gzip stream")
}
