package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// rebuild --check goes on past a session it cannot compare (here: no
// service answers), lists every such session, and exits 3: it could not
// compare.
func TestRebuild_CheckListsEveryFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = bus.EnsureStream(ctx, js, def)
	require.NoError(t, err)
	for i := range 3 {
		_, err := js.Publish(ctx, fmt.Sprintf("transcripts.s%d", i), []byte(`{"role":"user","content":"hi"}`))
		require.NoError(t, err)
	}

	code, out, errOut := runCmd(t, "", "rebuild", "--check", "--nats", url)
	require.Equal(t, exitCheckFailed, code, "stdout: %s\nstderr: %s", out, errOut)
	for i := range 3 {
		require.Contains(t, out, fmt.Sprintf("failed: s%d: ", i))
	}
	require.Equal(t, 3, strings.Count(out, "failed: "), "stdout: %s", out)
	require.Contains(t, errOut, "3 of 3 sessions could not be compared with the running service")
}

// rebuild --check exits 1 when a session differs, 3 when it cannot run.
func TestRebuild_CheckExitCodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := natstest.Start(t)
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = bus.EnsureStream(ctx, js, def)
	require.NoError(t, err)
	_, err = js.Publish(ctx, "transcripts.s0", []byte(`{"role":"user","content":"hi"}`))
	require.NoError(t, err)
	// A service that answers an empty context: wrong.
	sub, err := nc.Subscribe("ctxd.context.*", func(m *nats.Msg) {
		m.Respond([]byte(`{"session":"s0","seq":0,"messages":[],"dropped":{}}`))
	})
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, nc.Flush())

	code, out, errOut := runCmd(t, "", "rebuild", "--check", "--nats", url)
	require.Equal(t, exitFailure, code, "stdout: %s\nstderr: %s", out, errOut)
	require.Contains(t, out, "differs: s0")

	code, _, errOut = runCmd(t, "", "rebuild", "--check", "--nats", "nats://127.0.0.1:1")
	require.Equal(t, exitCheckFailed, code, errOut)
	code, _, _ = runCmd(t, "", "rebuild", "--nats", "nats://127.0.0.1:1")
	require.Equal(t, exitFailure, code, "without --check a failure is 1")
	code, _, _ = runCmd(t, "", "rebuild", "--check", "extra")
	require.Equal(t, exitUsage, code)
}
