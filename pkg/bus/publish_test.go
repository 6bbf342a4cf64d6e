package bus_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

// PublishAll stores every record in order, more than one window of them,
// and returns the last one's sequence; with message ids, publishing them
// again stores nothing; a record over the max payload publishes nothing.
func TestPublishAll(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)

	var records [][]byte
	for i := range 1200 {
		records = append(records, fmt.Appendf(nil, `{"role":"user","content":"%d"}`, i))
	}
	last, err := bus.PublishAll(ctx, js.Conn(), "transcripts.s1", records, nil)
	require.NoError(t, err)
	require.Equal(t, uint64(1200), last)
	var got [][]byte
	require.NoError(t, bus.ReadSubject(ctx, js.Conn(), "TRANSCRIPTS", "transcripts.s1", 1, last, func(_ uint64, data []byte) error {
		got = append(got, bytes.Clone(data))
		return nil
	}))
	require.Equal(t, records, got)

	id := func(i int) string { return fmt.Sprintf("run-%d", i) }
	last, err = bus.PublishAll(ctx, js.Conn(), "transcripts.s2", records[:3], id)
	require.NoError(t, err)
	require.Equal(t, uint64(1203), last)
	last, err = bus.PublishAll(ctx, js.Conn(), "transcripts.s2", records[:3], id)
	require.NoError(t, err)
	require.Equal(t, uint64(1203), last, "a re-run within the duplicate window stores nothing")

	huge := bytes.Repeat([]byte("x"), int(js.Conn().MaxPayload())+1)
	_, err = bus.PublishAll(ctx, js.Conn(), "transcripts.s3", [][]byte{records[0], huge}, nil)
	require.ErrorIs(t, err, nats.ErrMaxPayload)
	require.ErrorContains(t, err, "record 2 is ")
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1203), info.State.Msgs, "nothing was published")

	_, err = bus.PublishAll(ctx, js.Conn(), "elsewhere.s1", records[:2], nil)
	require.ErrorContains(t, err, "record 1 of 2 not stored")
}
