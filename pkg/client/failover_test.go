package client

import (
	"bytes"
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
)

// A request whose instance never answers is answered by its hedge: the
// same request again, from an inbox of its own, to ctxd.context.<session>,
// where the queue group picks an instance. The stuck instance here is a
// queue subscriber that swallows what it gets; once it has the request
// the server drops it (its connection closes, as for an instance that
// stopped answering pings) and a live instance joins the group.
func TestContext_HedgeAnswersWhenAnInstanceIsStuck(t *testing.T) {
	url := natstest.Start(t)
	nc := natstest.Connect(t, url)
	stuck, err := nats.Connect(url)
	require.NoError(t, err)
	defer stuck.Close()
	swallowed := make(chan struct{}, 1)
	_, err = stuck.QueueSubscribe("ctxd.context.s", "q", func(m *nats.Msg) {
		select {
		case swallowed <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	require.NoError(t, stuck.Flush())
	go func() {
		<-swallowed
		live := natstest.Connect(t, url)
		if _, err := live.QueueSubscribe("ctxd.context.s", "q", func(m *nats.Msg) { m.Respond([]byte("live")) }); err != nil {
			t.Error(err)
		}
		live.Flush()
		stuck.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := Context(ctx, nc, "s", Request{})
	require.NoError(t, err, "the hedge is answered well before the deadline")
	require.Equal(t, "live", string(got))
	require.NoError(t, ctx.Err())
}

// The client's own server shuts down while its request waits: the
// request, lost with the connection, is sent again once the client has
// reconnected to another node of the cluster, and answered. A client
// that does not reconnect gets an error that names the lost connection
// at once, not at its deadline.
func TestContext_ConnectionLostMidRequest(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	// The service is on n3. serve takes session's requests there: each
	// is answered when answer says so, else never; probes are answered.
	srv, err := nats.Connect(c.Nodes[2].URL, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(t, err)
	defer srv.Close()
	serve := func(t *testing.T, session string) (taken chan struct{}, answer chan bool) {
		taken, answer = make(chan struct{}, 16), make(chan bool, 16)
		_, err := srv.Subscribe("ctxd.context."+session, func(m *nats.Msg) {
			if m.Header.Get("Probe") != "" {
				m.Respond(nil)
				return
			}
			taken <- struct{}{}
			if <-answer {
				m.Respond([]byte("answered"))
			}
		})
		require.NoError(t, err)
		require.NoError(t, srv.Flush())
		return taken, answer
	}
	// connect connects to n1, once session's service is seen there.
	connect := func(t *testing.T, session string, opts ...nats.Option) *nats.Conn {
		var nc *nats.Conn
		require.Eventually(t, func() bool {
			var err error
			nc, err = nats.Connect(c.Nodes[0].URL+","+c.Nodes[1].URL, append([]nats.Option{nats.DontRandomize()}, opts...)...)
			if err == nil && nc.ConnectedServerName() != "n1" {
				nc.Close()
				err = nats.ErrNoServers
			}
			return err == nil
		}, 30*time.Second, 20*time.Millisecond, "n1 takes connections")
		t.Cleanup(nc.Close)
		require.Eventually(t, func() bool {
			probe := nats.NewMsg("ctxd.context." + session)
			probe.Header.Set("Probe", "1")
			_, err := nc.RequestMsg(probe, time.Second)
			return err == nil
		}, 30*time.Second, 20*time.Millisecond, "the service's subscription reaches n1")
		return nc
	}

	t.Run("reconnects", func(t *testing.T) {
		taken, answer := serve(t, "s1")
		nc := connect(t, "s1", nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		errs := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := Context(ctx, nc, "s1", Request{Hedge: -1})
			if err == nil && string(got) != "answered" {
				err = errUnexpected(got)
			}
			errs <- err
		}()
		<-taken
		c.Nodes[0].Stop()
		t.Cleanup(func() { c.Nodes[0].Start(t) })
		answer <- false // the first is lost with n1
		answer <- true  // the one sent again is answered
		require.NoError(t, <-errs, "answered after the reconnect")
	})

	t.Run("reconnects while chunks come", func(t *testing.T) {
		// The first request's reply begins, and its other chunks are lost
		// with n1; the request sent again is answered whole.
		var requests atomic.Int32
		_, err := srv.Subscribe("ctxd.context.s3", func(m *nats.Msg) {
			if m.Header.Get("Probe") != "" {
				m.Respond(nil)
				return
			}
			if requests.Add(1) > 1 {
				m.Respond([]byte("answered"))
				return
			}
			srv.PublishMsg(&nats.Msg{Subject: m.Reply, Data: []byte("part"), Header: nats.Header{
				headerChunks: {"3"}, headerChunk: {"0"}, headerReplyBytes: {"12"},
			}})
		})
		require.NoError(t, err)
		require.NoError(t, srv.Flush())
		nc := connect(t, "s3", nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		before := nc.Stats().InMsgs
		errs := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := Context(ctx, nc, "s3", Request{Hedge: -1})
			if err == nil && string(got) != "answered" {
				err = errUnexpected(got)
			}
			errs <- err
		}()
		require.Eventually(t, func() bool { return nc.Stats().InMsgs > before }, 20*time.Second, time.Millisecond, "the first chunk came")
		c.Nodes[0].Stop()
		t.Cleanup(func() { c.Nodes[0].Start(t) })
		require.NoError(t, <-errs, "answered whole after the reconnect")
		require.Equal(t, int32(2), requests.Load())
	})

	t.Run("does not reconnect", func(t *testing.T) {
		taken, answer := serve(t, "s2")
		nc := connect(t, "s2", nats.NoReconnect())
		errs := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := Context(ctx, nc, "s2", Request{Hedge: -1})
			errs <- err
		}()
		<-taken
		c.Nodes[0].Stop()
		t.Cleanup(func() { c.Nodes[0].Start(t) })
		answer <- false
		err := <-errs
		require.ErrorIs(t, err, ErrConnectionLost)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "at once, not at the deadline")
	})
}

type errUnexpected []byte

func (e errUnexpected) Error() string { return "unexpected reply " + string(e) }

// The hedge races only for the first message: the chunks of the reply
// whose first message came first are joined, never those of the other
// send, even when both are pushed at once, interleaved.
func TestContext_HedgeChunksFromOneReply(t *testing.T) {
	nc := startNATS(t)
	first := bytes.Repeat([]byte("f"), 30000)
	second := bytes.Repeat([]byte("s"), 30000)
	var held *nats.Msg
	_, err := nc.Subscribe("ctxd.context.c", func(m *nats.Msg) {
		if held == nil {
			held = m // the first send: answered along with the hedge
			return
		}
		for k := range 3 {
			for _, r := range []struct {
				reply string
				body  []byte
			}{{m.Reply, second}, {held.Reply, first}} {
				h := nats.Header{headerChunks: {"3"}, headerChunk: {strconv.Itoa(k)}}
				if k == 0 {
					h.Set(headerReplyBytes, strconv.Itoa(len(r.body)))
				}
				nc.PublishMsg(&nats.Msg{Subject: r.reply, Data: r.body[10000*k:][:10000], Header: h})
			}
		}
	})
	require.NoError(t, err)
	got, err := Context(timeout(t), nc, "c", Request{Hedge: 50 * time.Millisecond})
	require.NoError(t, err)
	require.True(t, bytes.Equal(first, got) || bytes.Equal(second, got), "one reply, whole, not a mix of both")
}
