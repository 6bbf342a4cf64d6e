package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/replytest"
	"github.com/ctxd/ctxd/internal/spectest"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
)

// startApp runs ctxd with an embedded server on a free port, storing in
// dir, and stops it when the test ends; each of configure adjusts the
// configuration first.
func startApp(t testing.TB, dir string, configure ...func(*app.Config)) *app.App {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.DataDir = dir
	cfg.Port = -1
	for _, f := range configure {
		f(&cfg)
	}
	if testing.Verbose() && cfg.Logger == nil {
		// A test that reads the logs keeps its own logger.
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	a := app.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Open(ctx))
	t.Cleanup(func() { a.Close() })
	return a
}

// client is a program that knows only the wire contract.
type client struct {
	t  testing.TB
	nc *nats.Conn
	js jetstream.JetStream
}

func newClient(t testing.TB, url string) *client {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &client{t: t, nc: nc, js: js}
}

// publish stores one record and returns its stream sequence.
func (c *client) publish(session string, data []byte) uint64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.js.Publish(ctx, "transcripts."+session, data)
	require.NoError(c.t, err)
	return ack.Sequence
}

// publishValue encodes a record value as JSON or msgpack and publishes it.
func (c *client) publishValue(session string, v any, asMsgpack bool) uint64 {
	c.t.Helper()
	var data []byte
	var err error
	if asMsgpack {
		data, err = record.MarshalMsgpack(v)
	} else {
		data, err = record.MarshalJSON(v)
	}
	require.NoError(c.t, err)
	return c.publish(session, data)
}

// asPublished returns a value as ctxd stores it when published in the
// given format: msgpack has no decimal literals, so a JSON number such as
// 0.0012 arrives as the nearest float64.
func asPublished(t testing.TB, v any, asMsgpack bool) any {
	t.Helper()
	if !asMsgpack {
		return v
	}
	data, err := record.MarshalMsgpack(v)
	require.NoError(t, err)
	out, err := record.DecodeMsgpack(data)
	require.NoError(t, err)
	return out
}

// asReplied returns a value as a client reads it from a reply in the
// given format: a float published in msgpack reads back from a JSON reply
// as its shortest decimal literal.
func asReplied(t testing.TB, v any, asMsgpack bool) any {
	t.Helper()
	if asMsgpack {
		return asPublished(t, v, true)
	}
	data, err := record.MarshalJSON(v)
	require.NoError(t, err)
	out, err := record.DecodeJSON(data)
	require.NoError(t, err)
	return out
}

// reply is a decoded context reply.
type reply struct {
	Session  string
	Seq      uint64
	Messages []any
	Dropped  *record.Map
	Digest   string // "" for a reply asked without it
}

// serviceError is an error reply of the service.
type serviceError struct{ code, desc string }

func (e *serviceError) Error() string { return e.code + " " + e.desc }

// request sends a raw request and returns the reply message.
func (c *client) request(subj string, body []byte, hdr nats.Header) *nats.Msg {
	c.t.Helper()
	msg, err := c.nc.RequestMsg(&nats.Msg{Subject: subj, Data: body, Header: hdr}, 40*time.Second)
	require.NoError(c.t, err, "request %s", subj)
	return msg
}

// fetch requests a session's context and decodes the reply.
func (c *client) fetch(session string, body []byte, hdr nats.Header) (*reply, *serviceError) {
	c.t.Helper()
	msg := c.request("ctxd.context."+session, body, hdr)
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &serviceError{code, msg.Header.Get(micro.ErrorHeader)}
	}
	return decodeReply(c.t, msg.Data), nil
}

// fetchSeq fetches with min_seq and fails the test on an error reply.
func (c *client) fetchSeq(session string, minSeq uint64, asMsgpack bool) *reply {
	c.t.Helper()
	var body []byte
	if asMsgpack {
		body, _ = record.MarshalMsgpack(record.NewMap("min_seq", int64(minSeq), "wait_ms", int64(10000)))
	} else {
		body = []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":10000}`, minSeq))
	}
	r, serr := c.fetch(session, body, nil)
	require.Nil(c.t, serr)
	return r
}

// decodeReply checks a reply's digest (when it has one: every reply but
// one asked with "digest": false) and decodes the reply without it.
func decodeReply(t testing.TB, data []byte) *reply {
	t.Helper()
	var v any
	var err error
	var digest string
	if r, err := protocol.ReadReply(data); err == nil && r.Digest != "" {
		digest = r.Digest
		data, err = replytest.Plain(data)
		require.NoError(t, err)
	}
	if record.IsJSON(data) {
		v, err = record.DecodeJSON(data)
	} else {
		v, err = record.DecodeMsgpack(data)
	}
	require.NoError(t, err)
	m, ok := v.(*record.Map)
	require.True(t, ok, "reply is not a map")
	require.Equal(t, 4, m.Len(), "reply fields: %s", data[:min(len(data), 300)])
	r := &reply{Digest: digest}
	var sok, qok, mok, dok bool
	sv, _ := m.Get("session")
	r.Session, sok = sv.(string)
	qv, _ := m.Get("seq")
	seq, qok := qv.(int64)
	r.Seq = uint64(seq)
	mv, _ := m.Get("messages")
	r.Messages, mok = mv.([]any)
	dv, _ := m.Get("dropped")
	r.Dropped, dok = dv.(*record.Map)
	require.True(t, sok && qok && mok && dok, "reply field types: %s", data[:min(len(data), 300)])
	return r
}

// requireMessages compares contexts structurally.
var requireMessages = spectest.RequireMessages

// loadFixtures returns the spec fixtures.
func loadFixtures(t testing.TB) []spectest.Case { return spectest.Cases(t) }

var nonSessionChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// sessionName turns a label into a valid, unique session id.
func sessionName(prefix string, i int, label string) string {
	s := fmt.Sprintf("%s-%d-%s", prefix, i, nonSessionChars.ReplaceAllString(label, "_"))
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
