//go:build !slow

package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
)

// However many clients ask at once for a session not in memory, ctxd
// loads it once, and every one gets the same context.
func TestService_ColdSessionLoadsOnce(t *testing.T) {
	dir := t.TempDir()
	a := startApp(t, dir)
	c := newClient(t, a.URL())
	var last uint64
	for i := range 50 {
		last = c.publish("cold", mustJSON(t, map[string]any{"role": "user", "content": fmt.Sprint("message ", i)}))
	}
	// The store that answers is the ingest's once it holds the pin.
	require.NoError(t, a.Wait(context.Background(), last, 20*time.Second))
	c.fetchSeq("cold", last, false)
	a.Store().Evict("cold")
	before := a.Store().Stats().Loads

	const clients = 32
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, serr := c.fetch("cold", nil, nil)
			if assert.Nil(t, serr) {
				assert.Equal(t, last, r.Seq)
				assert.Len(t, r.Messages, 50)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, before+1, a.Store().Stats().Loads, "loads of the session")
}

// A session with no records asked for again and again is read at most
// once; a record published to it is in the next reply that asks for it.
func TestService_UnknownSessionRemembered(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	other := c.publish("other", mustJSON(t, map[string]any{"role": "user", "content": "x"}))
	// The store that answers is the ingest's once it holds the pin.
	require.NoError(t, a.Wait(context.Background(), other, 20*time.Second))
	before := a.Store().Stats().Loads
	for range 20 {
		r, serr := c.fetch("ghost", nil, nil)
		require.Nil(t, serr)
		require.Zero(t, r.Seq)
		require.Empty(t, r.Messages)
	}
	// Once, or never where the ingest has met every record from the
	// stream's first and knows the session has none.
	require.LessOrEqual(t, a.Store().Stats().Loads, before+1, "loads of a session without records")

	seq := c.publish("ghost", mustJSON(t, map[string]any{"role": "user", "content": "boo"}))
	r := c.fetchSeq("ghost", seq, false)
	require.Equal(t, seq, r.Seq)
	require.Len(t, r.Messages, 1)
	r, serr := c.fetch("ghost", nil, nil)
	require.Nil(t, serr)
	require.Equal(t, seq, r.Seq, "no reply goes back to the miss")
}

// Past --max-waiters, a request that would wait is refused at once with
// 503; the others are answered.
func TestService_WaitersBounded(t *testing.T) {
	a := startApp(t, t.TempDir(), func(cfg *app.Config) { cfg.MaxWaiters = 5 })
	c := newClient(t, a.URL())
	last := c.publish("s", mustJSON(t, map[string]any{"role": "user", "content": "x"}))
	// A request without min_seq is answered at once from what the
	// instance applied: let that be the record.
	require.NoError(t, a.Wait(context.Background(), last, 20*time.Second))
	body := []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":30000}`, last+1))

	// The endpoint takes one connection's requests in order: the five
	// wait before the sixth comes.
	inbox := c.nc.NewInbox()
	parked, err := c.nc.SubscribeSync(inbox + ".*")
	require.NoError(t, err)
	for i := range 5 {
		require.NoError(t, c.nc.PublishRequest("ctxd.context.s", inbox+"."+strconv.Itoa(i), body))
	}
	_, serr := c.fetch("s", body, nil)
	require.NotNil(t, serr)
	require.Equal(t, "503", serr.code)
	require.Contains(t, serr.desc, "too many requests waiting for min_seq")
	// No wait needed: answered.
	r, serr := c.fetch("s", nil, nil)
	require.Nil(t, serr)
	require.Equal(t, last, r.Seq)

	next := c.publish("s", mustJSON(t, map[string]any{"role": "user", "content": "y"}))
	for range 5 {
		msg, err := parked.NextMsg(30 * time.Second)
		require.NoError(t, err)
		require.Empty(t, msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader))
		require.Equal(t, next, decodeReply(t, msg.Data).Seq)
	}
}

// fetchByID gets a context as a client of protocol 2 does: the first
// chunk answers the request, and the others are fetched from the subject
// it names.
//
// A 503 (the service is busy: retry later) is retried, as such a client
// does, for up to 30 s.
func fetchByID(t *testing.T, c *client, session string, minSeq uint64) *reply {
	t.Helper()
	var msg *nats.Msg
	for deadline := time.Now().Add(30 * time.Second); ; {
		msg = c.request("ctxd.context."+session, []byte(fmt.Sprintf(`{"min_seq":%d}`, minSeq)), nil)
		if msg.Header.Get(micro.ErrorCodeHeader) != "503" || time.Now().After(deadline) {
			break
		}
		t.Logf("fetch by id: %s; retrying", msg.Header.Get(micro.ErrorHeader))
		time.Sleep(50 * time.Millisecond)
	}
	require.Empty(t, msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader))
	n, err := strconv.Atoi(msg.Header.Get("Ctxd-Chunks"))
	require.NoError(t, err)
	prefix := msg.Header.Get("Ctxd-Chunk-Subject")
	require.NotEmpty(t, prefix)
	data := append([]byte(nil), msg.Data...)
	for k := 1; k < n; k++ {
		part := c.request(prefix+"."+strconv.Itoa(k), nil, nil)
		require.Empty(t, part.Header.Get(micro.ErrorCodeHeader), part.Header.Get(micro.ErrorHeader))
		data = append(data, part.Data...)
	}
	return decodeReply(t, data)
}

// A context larger than the max payload reaches pkg/client whole, its
// chunks pushed; a client that knows only protocol 2 fetches them; and
// replies nobody reads do not keep either from getting it. While the
// flood is answered the service may refuse a request as busy (503, retry
// later: the session's lock was held by another answer, and the load
// lane's queue was full); a client that retries, as a 503 asks, gets the
// same context.
func TestService_ChunkedRepliesUnderFlood(t *testing.T) {
	a := startApp(t, t.TempDir(), func(cfg *app.Config) { cfg.MaxPayload = 64 << 10 })
	c := newClient(t, a.URL())
	var last uint64
	for i := range 6 {
		last = c.publish("big", mustJSON(t, map[string]any{"role": "user", "content": strings.Repeat(strconv.Itoa(i), 50<<10)}))
	}
	pushed := func() *reply {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for {
			data, err := ctxdclient.Context(ctx, c.nc, "big", ctxdclient.Request{MinSeq: last})
			var busy *ctxdclient.Error
			if errors.As(err, &busy) && busy.Code == "503" && ctx.Err() == nil {
				t.Logf("pushed: %v; retrying", err)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			require.NoError(t, err)
			return decodeReply(t, data)
		}
	}
	want := pushed()
	require.Len(t, want.Messages, 6)
	require.Equal(t, want, fetchByID(t, c, "big", last))

	// Requests whose replies nobody reads, from ever new reply subjects:
	// more than the 1 GiB held replies may take.
	for i := range 4000 {
		require.NoError(t, c.nc.PublishRequest("ctxd.context.big", fmt.Sprintf("_INBOX.nobody%d.x", i), nil))
	}
	require.Equal(t, want, pushed())
	require.Equal(t, want, fetchByID(t, c, "big", last))
}
