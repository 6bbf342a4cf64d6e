package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// rebuild --check goes on past a session it cannot compare (here: no
// service answers), lists every such session, and exits 1.
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
	require.Equal(t, 1, code, "stdout: %s\nstderr: %s", out, errOut)
	for i := range 3 {
		require.Contains(t, out, fmt.Sprintf("failed: s%d: ", i))
	}
	require.Equal(t, 3, strings.Count(out, "failed: "), "stdout: %s", out)
	require.Contains(t, errOut, "3 of 3 sessions could not be compared with the running service")
}
