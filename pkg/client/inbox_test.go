package client

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/natsd"
)

// privateInboxServer runs a server whose user "app" may subscribe only
// to its own inbox prefix, _INBOX_app, and "svc" to anything.
func privateInboxServer(t *testing.T) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "server.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`max_payload: 16KB
authorization { users = [
  { user: svc, password: pw }
  { user: app, password: pw, permissions: {
      publish: { allow: ["ctxd.>"] }
      subscribe: { allow: ["_INBOX_app.>"] } } }
] }
`), 0o600))
	return natstest.Start(t, func(srv *natsd.Server) { srv.ConfigFile = conf })
}

func connect(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// A user allowed only its own inbox prefix: a connection on nats.go's
// default inbox is told at once, naming the inbox; one made with the
// prefix passes, and its requests get their replies, chunks included.
func TestCheckInbox(t *testing.T) {
	url := privateInboxServer(t)
	serveChunks(t, connect(t, url, nats.UserInfo("svc", "pw")))

	nc := connect(t, url, nats.UserInfo("app", "pw"))
	err := CheckInbox(timeout(t), nc)
	require.ErrorIs(t, err, ErrInboxRefused)
	require.Contains(t, err.Error(), "_INBOX.")

	nc = connect(t, url, nats.UserInfo("app", "pw"), nats.CustomInboxPrefix("_INBOX_app"))
	require.NoError(t, CheckInbox(timeout(t), nc))
	for _, session := range []string{"s", "old"} {
		out, err := Context(timeout(t), nc, session, Request{})
		require.NoError(t, err, session)
		require.Equal(t, chunked, out, session)
	}
}

// chunked is the reply serveChunks sends, larger than the server's max
// payload.
var chunked = bytes.Repeat([]byte("0123456789"), 3000)

// serveChunks answers ctxd.context.s with chunks pushed to the reply
// subject, and ctxd.context.old with chunks fetched from
// ctxd.chunk.x.id (protocol 2).
func serveChunks(t *testing.T, nc *nats.Conn) {
	t.Helper()
	parts := [][]byte{chunked[:10000], chunked[10000:20000], chunked[20000:]}
	_, err := nc.Subscribe("ctxd.context.s", func(m *nats.Msg) {
		for k, p := range parts {
			h := nats.Header{headerChunks: {"3"}, headerChunk: {strconv.Itoa(k)}}
			nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: p, Header: h})
		}
	})
	require.NoError(t, err)
	_, err = nc.Subscribe("ctxd.context.old", func(m *nats.Msg) {
		m.RespondMsg(&nats.Msg{Data: parts[0], Header: nats.Header{headerChunks: {"3"}, headerChunkSubject: {"ctxd.chunk.x.id"}}})
	})
	require.NoError(t, err)
	_, err = nc.Subscribe("ctxd.chunk.x.id.*", func(m *nats.Msg) {
		k, _ := strconv.Atoi(m.Subject[len("ctxd.chunk.x.id."):])
		m.Respond(parts[k])
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
}
