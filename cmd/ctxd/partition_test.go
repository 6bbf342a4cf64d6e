package main

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/streams"
)

// ctxd partition --data partitions the stream in the embedded server's
// store, stopped; while a server runs on the store it is refused, and
// the stream is left as it was.
func TestPartition_Data(t *testing.T) {
	dir := t.TempDir()
	srv := natsd.New(dir)
	srv.Port = -1
	require.NoError(t, srv.Open())
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = bus.EnsureStream(context.Background(), js, def)
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "transcripts.s1", []byte(`{"role":"user","content":"hi"}`))
	require.NoError(t, err)

	code, _, errOut := runCmd(t, "", "partition", "--data", dir, "--partitions", "4")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "in use")
	require.Contains(t, errOut, "stop the ctxd serve that runs on it first")
	nc.Close()
	require.NoError(t, srv.Close())

	code, out, errOut := runCmd(t, "", "partition", "--data", dir, "--partitions", "4")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "4 partitions; records up to sequence 1 stay on transcripts.<session>")

	code, _, errOut = runCmd(t, "", "partition", "--data", dir, "--nats", "nats://127.0.0.1:1", "--partitions", "4")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--data and --nats name two servers")

	require.NoError(t, srv.Open())
	defer srv.Close()
	nc, err = nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err = bus.JetStream(nc)
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), def.Name)
	require.NoError(t, err)
	l, err := bus.LayoutOf(st.CachedInfo().Config)
	require.NoError(t, err)
	require.Equal(t, 4, l.P)
	require.Equal(t, uint64(1), l.After)
}
