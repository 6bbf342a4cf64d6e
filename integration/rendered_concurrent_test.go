//go:build !slow

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
	"github.com/ctxd/ctxd/pkg/server"
)

// TestService_RenderedTurnsAtOnce is TestService_RenderedTurns with
// several clients fetching each turn at once, in the same format, as JSON
// and msgpack: the replies grow past 1 MiB (sent on the large replies'
// connection) and past the max payload (in chunks, pushed or held for
// fetches), and with a cache of less than a session every turn loads the
// session again. Every reply is a rendering from scratch of the session's
// records up to the turn's last one.
func TestService_RenderedTurnsAtOnce(t *testing.T) {
	for _, small := range []bool{false, true} {
		t.Run(map[bool]string{false: "kept", true: "evicted"}[small], func(t *testing.T) { testRenderedTurnsAtOnce(t, small) })
	}
}

func testRenderedTurnsAtOnce(t *testing.T, small bool) {
	a := startApp(t, t.TempDir(), func(cfg *app.Config) {
		cfg.MaxPayload = 2 << 20
		if small {
			cfg.CacheBytes = 1 << 20
		}
	})
	c := newClient(t, a.URL())
	type session struct {
		id   string
		f    render.Format
		g    *workload.Generator
		recs []projection.Record
	}
	var all []*session
	for i, f := range []render.Format{render.Anthropic, render.Gemini} {
		all = append(all, &session{id: fmt.Sprintf("at%d", i), f: f, g: workload.New(uint64(40+i), workload.Default.WithScreenshots(40<<10, 8))})
	}
	const clients = 6
	conns := make([]*nats.Conn, clients)
	for i := range conns {
		nc, err := nats.Connect(a.URL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		conns[i] = nc
	}
	type got struct {
		what string
		data []byte
		err  error
	}
	large, chunked := 0, 0
	turns := 22
	if testing.Short() {
		turns = 8
	}
	for turn := range turns {
		for _, s := range all {
			recs := s.g.Next()
			if turn == 0 {
				recs = s.g.Session(20)
			}
			// A long message each turn: the context passes 1 MiB, then
			// the max payload.
			recs = append(recs, record.NewMap("role", "user", "content", strings.Repeat(fmt.Sprintf("turn %d. ", turn), 120<<10/9)))
			var last uint64
			for _, v := range recs {
				last = c.publishValue(s.id, v, false)
				s.recs = append(s.recs, projection.Record{Seq: last, Value: v})
			}
			replies := make([]got, clients)
			var wg sync.WaitGroup
			for k := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					mp, push := k%2 == 1, k%3 == 2
					what := fmt.Sprintf("%s, turn %d, %s, client %d (msgpack %v, push %v)", s.id, turn, s.f, k, mp, push)
					req := record.NewMap("min_seq", int64(last), "wait_ms", int64(10000), "format", string(s.f))
					var body []byte
					var err error
					if mp {
						body, err = record.MarshalMsgpack(req)
					} else {
						body, err = record.MarshalJSON(req)
					}
					if err == nil {
						body, err = fetchWhole(conns[k], "ctxd.context."+s.id, body, push)
					}
					replies[k] = got{what: what, data: body, err: err}
				}()
			}
			wg.Wait()
			for _, r := range replies {
				require.NoError(t, r.err, r.what)
				requireRendering(t, r.what, s.id, s.f, s.recs, r.data)
				switch {
				case len(r.data) > 2<<20-1024:
					chunked++
				case len(r.data) >= server.DefaultLargeReplyBytes:
					large++
				}
			}
		}
	}
	st := a.Stats()
	t.Logf("%d replies of 1 MiB or more sent whole, %d in chunks; %d evictions, %d loads", large, chunked, st.Evictions, st.Loads)
	if !testing.Short() {
		require.Positive(t, large, "replies on the large replies' connection")
		require.Positive(t, chunked, "replies in chunks")
	}
	if small {
		require.Positive(t, st.Evictions)
	}
}

// fetchWhole sends a context request and returns the whole reply, its
// chunks pushed or fetched, or an error naming the error reply.
func fetchWhole(nc *nats.Conn, subj string, body []byte, push bool) ([]byte, error) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	hdr := nats.Header{}
	if push {
		hdr.Set(server.HeaderAcceptChunks, "push")
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: subj, Reply: inbox, Data: body, Header: hdr}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	first, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, err
	}
	if code := first.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, fmt.Errorf("error reply %s: %s", code, first.Header.Get(micro.ErrorHeader))
	}
	nh := first.Header.Get(server.HeaderChunks)
	if nh == "" {
		return first.Data, nil
	}
	n, err := strconv.Atoi(nh)
	if err != nil {
		return nil, err
	}
	whole := append([]byte(nil), first.Data...)
	prefix := first.Header.Get(server.HeaderChunkSubject)
	for k := 1; k < n; k++ {
		var m *nats.Msg
		if prefix == "" {
			m, err = sub.NextMsgWithContext(ctx)
		} else {
			m, err = nc.RequestWithContext(ctx, prefix+"."+strconv.Itoa(k), nil)
		}
		if err != nil {
			return nil, fmt.Errorf("chunk %d of %d: %w", k, n, err)
		}
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			return nil, fmt.Errorf("chunk %d of %d: error reply %s: %s", k, n, code, m.Header.Get(micro.ErrorHeader))
		}
		whole = append(whole, m.Data...)
	}
	if got := strconv.Itoa(len(whole)); got != first.Header.Get(server.HeaderReplyBytes) {
		return nil, fmt.Errorf("%s bytes in chunks, %s said", got, first.Header.Get(server.HeaderReplyBytes))
	}
	return whole, nil
}
