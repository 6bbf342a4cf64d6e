package app

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// The inspector lists a session once and reads all its records on a
// stream partitioned after it had records.
func TestInspectSource_Partitioned(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := t.Context()
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, def)
	require.NoError(t, err)
	var seqs []uint64
	publish := func() {
		ack, err := js.Publish(ctx, "transcripts.s1", []byte(`{"role":"user","content":"x"}`))
		require.NoError(t, err)
		seqs = append(seqs, ack.Sequence)
	}
	publish()
	publish()
	_, err = bus.Partition(ctx, js.Conn(), def.Name, 16)
	require.NoError(t, err)
	publish()
	src := &inspectSource{StreamReader: StreamReader{NC: nc, Stream: def.Name}}
	refs, err := src.Sessions(ctx)
	require.NoError(t, err)
	require.Len(t, refs, 1)
	require.Equal(t, "s1", refs[0].ID)
	require.Equal(t, uint64(3), refs[0].Records)
	require.Equal(t, seqs[2], refs[0].LastSeq)
	var got []uint64
	require.NoError(t, src.Records(ctx, "s1", seqs[2], func(seq uint64, _ []byte) error {
		got = append(got, seq)
		return nil
	}))
	require.Equal(t, seqs, got)
}
