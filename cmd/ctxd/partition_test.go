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

// A store whose stream was left half partitioned (the transform without
// the metadata that says where the older records end) is refused by
// ctxd serve and by ctxd import, naming the command that finishes it
// there; ctxd partition with another count is refused and names the
// stream's; with its own it finishes it.
func TestPartition_DataHalfDone(t *testing.T) {
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
	st, err := bus.EnsureStream(context.Background(), js, def)
	require.NoError(t, err)
	for range 3 {
		_, err = js.Publish(context.Background(), "transcripts.s1", []byte(`{"role":"user","content":"hi"}`))
		require.NoError(t, err)
	}
	cfg := st.CachedInfo().Config
	cfg.SubjectTransform = streams.PartitionTransform(4)
	_, err = js.UpdateStream(context.Background(), cfg)
	require.NoError(t, err)
	// An import would not find the records there, and store them again.
	code, _, errOut := runCmd(t, "", "import", "--nats", srv.ClientURL(), "--from", "pi", samples+"pi/agent-sessions-pi-small.jsonl")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "its partitioning was not finished")
	require.Contains(t, errOut, "run ctxd partition --partitions 4 to finish it")
	nc.Close()
	require.NoError(t, srv.Close())

	hint := "ctxd partition --data " + dir + " --partitions 4"
	code, _, errOut = runCmd(t, "", "serve", "--port", "-1", "--data", dir)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "its partitioning was not finished")
	require.Contains(t, errOut, "record 3 on transcripts.s1")
	require.Contains(t, errOut, hint)

	code, _, errOut = runCmd(t, "", "partition", "--data", dir, "--partitions", "8")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "has 4 partitions already")
	require.Contains(t, errOut, hint)

	code, out, errOut := runCmd(t, "", "partition", "--data", dir, "--partitions", "4")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "its partitioning was not finished, and is now")
	require.Contains(t, out, "4 partitions; records up to sequence 3 stay on transcripts.<session>")
	code, out, errOut = runCmd(t, "", "partition", "--data", dir, "--partitions", "4")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, "not finished")
}
