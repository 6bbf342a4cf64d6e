package client

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// Publish stores a record on the session's subject and returns its
// sequence; a message id stores it once; a session id, a missing stream
// and a refused record are errors that say so.
func TestPublish(t *testing.T) {
	url := natstest.Start(t)
	nc := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	_, err := Publish(ctx, nc, "s1", []byte(`{"role":"user","content":"hi"}`), "")
	require.ErrorContains(t, err, "no stream stores it")

	_, err = Publish(ctx, nc, "a.b", []byte(`{}`), "")
	require.ErrorIs(t, err, subject.ErrBadSession)

	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cfg, err := streams.Transcripts()
	require.NoError(t, err)
	cfg.MaxMsgSize = 64
	st, err := js.CreateStream(ctx, cfg)
	require.NoError(t, err)

	seq, err := Publish(ctx, nc, "s1", []byte(`{"role":"user","content":"hi"}`), "")
	require.NoError(t, err)
	require.Equal(t, uint64(1), seq)
	seq, err = Publish(ctx, nc, "s1", []byte(`{"role":"user","content":"again"}`), "m-1")
	require.NoError(t, err)
	require.Equal(t, uint64(2), seq)
	seq, err = Publish(ctx, nc, "s1", []byte(`{"role":"user","content":"again"}`), "m-1")
	require.NoError(t, err)
	require.Equal(t, uint64(2), seq, "a repeated message id is stored once")

	m, err := st.GetMsg(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "transcripts.s1", m.Subject)

	_, err = Publish(ctx, nc, "s1", make([]byte, 100), "")
	require.ErrorIs(t, err, ErrPublish, "larger than the stream's largest message")
}
