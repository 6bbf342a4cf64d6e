package client

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/record"
)

func startNATS(t *testing.T) *nats.Conn {
	url := natstest.Start(t, func(srv *natsd.Server) { srv.MaxPayload = 16 << 10 })
	return natstest.Connect(t, url)
}

func timeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Do joins a reply whose chunks are pushed to its inbox, as it asks.
func TestDo_PushedChunks(t *testing.T) {
	nc := startNATS(t)
	whole := bytes.Repeat([]byte("0123456789"), 5000)
	parts := [][]byte{whole[:12000], whole[12000:24000], whole[24000:36000], whole[36000:]}
	_, err := nc.Subscribe("ctxd.context.s", func(m *nats.Msg) {
		if m.Header.Get(headerAcceptChunks) != "push" {
			m.RespondMsg(&nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: {"500"}}})
			return
		}
		for k, p := range parts {
			h := nats.Header{headerChunks: {"4"}, headerChunk: {strconv.Itoa(k)}}
			if k == 0 {
				h.Set(headerReplyBytes, strconv.Itoa(len(whole)))
			}
			nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: p, Header: h})
		}
	})
	require.NoError(t, err)
	got, err := Context(timeout(t), nc, "s", Request{})
	require.NoError(t, err)
	require.Equal(t, whole, got)
}

// A service that does not push (protocol 2) names a subject to fetch
// the chunks from: Do fetches them.
func TestDo_FetchedChunks(t *testing.T) {
	nc := startNATS(t)
	whole := bytes.Repeat([]byte("abcdefghij"), 3000)
	_, err := nc.Subscribe("ctxd.context.s", func(m *nats.Msg) {
		m.RespondMsg(&nats.Msg{Data: whole[:10000], Header: nats.Header{
			headerChunks: {"3"}, headerChunkSubject: {"old.chunk.id"}, headerReplyBytes: {strconv.Itoa(len(whole))},
		}})
	})
	require.NoError(t, err)
	_, err = nc.Subscribe("old.chunk.id.*", func(m *nats.Msg) {
		switch m.Subject {
		case "old.chunk.id.1":
			m.Respond(whole[10000:20000])
		case "old.chunk.id.2":
			m.Respond(whole[20000:])
		}
	})
	require.NoError(t, err)
	got, err := Context(timeout(t), nc, "s", Request{})
	require.NoError(t, err)
	require.Equal(t, whole, got)
}

// Errors and missing services come back as before.
func TestDo_Errors(t *testing.T) {
	nc := startNATS(t)
	_, err := Context(timeout(t), nc, "nobody", Request{})
	require.ErrorIs(t, err, ErrNoService)

	_, err = nc.Subscribe("ctxd.context.busy", func(m *nats.Msg) {
		m.RespondMsg(&nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: {"503"}, micro.ErrorHeader: {"too many"}}})
	})
	require.NoError(t, err)
	_, err = Context(timeout(t), nc, "busy", Request{})
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "503", e.Code)
}

// With Partitions the request goes to ctxd.p.<k>.<session> first, and to
// ctxd.context.<session> when nobody serves the partition.
func TestContext_Partitions(t *testing.T) {
	nc := startNATS(t)
	// fnv32a("s1") % 8 = 1
	_, err := nc.Subscribe("ctxd.context.s1", func(m *nats.Msg) { m.Respond([]byte("v1")) })
	require.NoError(t, err)
	got, err := Context(timeout(t), nc, "s1", Request{Partitions: 8})
	require.NoError(t, err)
	require.Equal(t, "v1", string(got), "nobody on the partition: the v1 subject")
	sub, err := nc.Subscribe("ctxd.p.1.s1", func(m *nats.Msg) { m.Respond([]byte("owner")) })
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	got, err = Context(timeout(t), nc, "s1", Request{Partitions: 8})
	require.NoError(t, err)
	require.Equal(t, "owner", string(got))
	got, err = Context(timeout(t), nc, "s1", Request{})
	require.NoError(t, err)
	require.Equal(t, "v1", string(got), "without partitions: the v1 subject")
	sub.Unsubscribe()

	_, err = Partitions(timeout(t), nc)
	require.ErrorIs(t, err, ErrNoService)
	_, err = nc.Subscribe("$SRV.INFO.ctxd", func(m *nats.Msg) { m.Respond([]byte(`{"metadata":{"partitions":"16"}}`)) })
	require.NoError(t, err)
	p, err := Partitions(timeout(t), nc)
	require.NoError(t, err)
	require.Equal(t, 16, p)
}

// Without hedges, a partition owner that does not answer within half
// the time left is passed over: the v1 subject answers. Each is told the
// time it has: the owner half, the v1 subject what is left after the
// owner's half. With hedges (the default) the v1 subject is asked at the
// hedge, and told the time left then.
func TestContext_PartitionOwnerStalled(t *testing.T) {
	nc := startNATS(t)
	timeouts := make(chan uint64, 2)
	timeoutOf := func(m *nats.Msg) uint64 {
		v, err := record.DecodeJSON(m.Data)
		require.NoError(t, err)
		n, _ := v.(*record.Map).Get("timeout_ms")
		got, _ := record.Float(n)
		return uint64(got)
	}
	_, err := nc.Subscribe("ctxd.context.s1", func(m *nats.Msg) {
		timeouts <- timeoutOf(m)
		m.Respond([]byte("v1"))
	})
	require.NoError(t, err)
	_, err = nc.Subscribe("ctxd.p.1.s1", func(m *nats.Msg) { timeouts <- timeoutOf(m) }) // never answers
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got, err := Context(ctx, nc, "s1", Request{Partitions: 8, Hedge: -1})
	require.NoError(t, err)
	require.Equal(t, "v1", string(got))
	owner, v1 := <-timeouts, <-timeouts
	require.LessOrEqual(t, owner, uint64(1000), "the owner has half the time")
	require.LessOrEqual(t, v1, uint64(1000), "the v1 subject has what is left")
	require.Greater(t, v1, uint64(0))

	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err = Context(ctx, nc, "s1", Request{Partitions: 8})
	require.NoError(t, err)
	require.Equal(t, "v1", string(got))
	owner, v1 = <-timeouts, <-timeouts
	require.Greater(t, owner, v1, "the hedge is told the time left when it is sent")
	require.Greater(t, v1, uint64(0))
}

// With ChunkTimeout a large reply may take longer than ctx's deadline,
// as long as its chunks come; ctx's cancellation still ends the wait.
func TestContext_ChunkTimeout(t *testing.T) {
	nc := startNATS(t)
	whole := bytes.Repeat([]byte("0123456789"), 3000)
	// serve answers session's context in 3 chunks, the second once gate
	// is closed.
	serve := func(session string, gate <-chan struct{}) {
		_, err := nc.Subscribe("ctxd.context."+session, func(m *nats.Msg) {
			m.RespondMsg(&nats.Msg{Data: whole[:10000], Header: nats.Header{
				headerChunks: {"3"}, headerChunkSubject: {"held." + session}, headerReplyBytes: {strconv.Itoa(len(whole))},
			}})
		})
		require.NoError(t, err)
		_, err = nc.Subscribe("held."+session+".*", func(m *nats.Msg) {
			k := int(m.Subject[len(m.Subject)-1] - '0')
			if k == 1 {
				<-gate
			}
			m.Respond(whole[10000*k:][:10000])
		})
		require.NoError(t, err)
	}

	// Chunk 1 comes after the deadline: without ChunkTimeout, too late.
	late := make(chan struct{})
	defer close(late)
	serve("s1", late)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Context(ctx, nc, "s1", Request{})
	require.ErrorIs(t, err, context.DeadlineExceeded)

	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	serve("s2", ctx.Done())
	got, err := Context(ctx, nc, "s2", Request{ChunkTimeout: 20 * time.Second})
	require.NoError(t, err)
	require.Equal(t, whole, got)

	never := make(chan struct{})
	defer close(never)
	serve("s3", never)
	ctx, cancel = context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := Context(ctx, nc, "s3", Request{ChunkTimeout: 20 * time.Second})
		errs <- err
	}()
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)
}
