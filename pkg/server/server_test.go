package server

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
)

// fakeProjections is a Projections made of functions; a nil function
// answers as an empty store would.
type fakeProjections struct {
	wait     func(ctx context.Context, seq uint64, timeout time.Duration) error
	view     func(ctx context.Context, session string, fn func(p *projection.Session)) error
	rejected func() []store.Rejection
	stats    func() store.Stats
}

func (f *fakeProjections) Wait(ctx context.Context, seq uint64, timeout time.Duration) error {
	if f.wait == nil {
		return store.ErrWaitExpired
	}
	return f.wait(ctx, seq, timeout)
}

func (f *fakeProjections) View(ctx context.Context, session string, fn func(p *projection.Session)) error {
	if f.view == nil {
		fn(nil)
		return nil
	}
	return f.view(ctx, session, fn)
}

func (f *fakeProjections) Rejected() []store.Rejection {
	if f.rejected == nil {
		return []store.Rejection{}
	}
	return f.rejected()
}

func (f *fakeProjections) Stats() store.Stats {
	if f.stats == nil {
		return store.Stats{}
	}
	return f.stats()
}

// viewOf serves fixed projections by session id.
func viewOf(sessions map[string]*projection.Session) func(context.Context, string, func(*projection.Session)) error {
	var mu sync.Mutex // a projection is not safe for concurrent use
	return func(_ context.Context, session string, fn func(*projection.Session)) error {
		mu.Lock()
		defer mu.Unlock()
		fn(sessions[session])
		return nil
	}
}

// startNATS runs an embedded server on a free port for the test.
func startNATS(t *testing.T, maxPayload int32) string {
	t.Helper()
	return natstest.Start(t, func(srv *natsd.Server) {
		if maxPayload > 0 {
			srv.MaxPayload = maxPayload
		}
	})
}

func connect(t *testing.T, url string) *nats.Conn { return natstest.Connect(t, url) }

// startService serves proj on its own connection; the service is closed
// when the test ends, if the test has not closed it.
func startService(t *testing.T, url string, proj Projections) (*Service, *nats.Conn) {
	t.Helper()
	nc := connect(t, url)
	svc := New(nc, proj)
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	return svc, nc
}

// request sends a request and returns the reply.
func request(t testing.TB, nc *nats.Conn, subj string, body []byte, hdr nats.Header) *nats.Msg {
	t.Helper()
	msg, err := nc.RequestMsg(&nats.Msg{Subject: subj, Data: body, Header: hdr}, 30*time.Second)
	require.NoError(t, err, "request %s", subj)
	return msg
}

func errorCode(msg *nats.Msg) string { return msg.Header.Get(micro.ErrorCodeHeader) }

// requireSilent checks that nothing has arrived on ch yet.
func requireSilent[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s already: %v", what, v)
	default:
	}
}

func TestService_Context(t *testing.T) {
	url := startNATS(t, 0)
	st := store.New()
	st.Advance(20)
	proj := &fakeProjections{
		wait: st.Wait,
		view: viewOf(map[string]*projection.Session{
			"demo": sessionOf(t, []string{`{"role":"user","content":"hi"}`, `{"role":"assistant","content":"hello"}`}, 14, 15),
			"far":  sessionOf(t, []string{`{"role":"user","content":"x","n":1E400}`}, 16),
		}),
	}
	startService(t, url, proj)
	nc := connect(t, url)
	msgpackAccept := nats.Header{"Accept": []string{"application/msgpack"}}

	tests := []struct {
		name     string
		session  string
		body     []byte
		hdr      nats.Header
		code     string // error code; empty for a reply
		desc     string // part of the error description
		msgpack  bool   // the reply's form
		seq      string
		messages int
	}{
		{name: "empty body: JSON", session: "demo", seq: "15", messages: 2},
		{name: "empty body, Accept msgpack", session: "demo", hdr: msgpackAccept, msgpack: true, seq: "15", messages: 2},
		{name: "JSON body", session: "demo", body: []byte(`{"min_seq":15,"wait_ms":0}`), seq: "15", messages: 2},
		{name: "msgpack body", session: "demo", body: msgpackOf(t, "min_seq", int64(20)), msgpack: true, seq: "15", messages: 2},
		{name: "unknown session", session: "nobody", seq: "0"},
		{name: "unknown session, msgpack", session: "nobody", body: []byte{0x80}, msgpack: true, seq: "0"},
		{name: "longest session id", session: strings.Repeat("a", 128), seq: "0"},
		{name: "bad session id", session: "a*b", code: CodeBadRequest, desc: "invalid session id"},
		{name: "session id too long", session: strings.Repeat("a", 129), code: CodeBadRequest, desc: "129 characters"},
		{name: "body not a map", session: "demo", body: []byte(`[1]`), code: CodeBadRequest, desc: "not a JSON object or msgpack map"},
		{name: "negative min_seq", session: "demo", body: []byte(`{"min_seq":-1}`), code: CodeBadRequest, desc: "min_seq must be a non-negative integer"},
		{name: "min_seq beyond 64 bits, refused at once", session: "demo", body: []byte(`{"min_seq":18446744073709551616}`), code: CodeBadRequest, desc: "min_seq must be at most 18446744073709551615"},
		{name: "JSON body after a byte order mark", session: "demo", body: []byte("\xef\xbb\xbf{\"min_seq\":15}"), code: CodeBadRequest, desc: "byte order mark before the JSON text: UTF-8's EF BB BF"},
		{name: "session id with a non-ASCII character", session: "s\u00e9ance", code: CodeBadRequest, desc: `"séance" has 'é' (U+00E9) at character 2`},
		{name: "min_seq not reached, wait_ms 0", session: "demo", body: []byte(`{"min_seq":21,"wait_ms":0}`), code: CodeWaitExpired},
		{name: "min_seq not reached in time", session: "demo", body: []byte(`{"min_seq":21,"wait_ms":1}`), code: CodeWaitExpired},
		{name: "no msgpack form", session: "far", body: []byte{0x80}, code: CodeInternal, desc: "request JSON"},
		{name: "no msgpack form, JSON is fine", session: "far", seq: "16", messages: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := request(t, nc, "ctxd.context."+tt.session, tt.body, tt.hdr)
			if tt.code != "" {
				require.Equal(t, tt.code, errorCode(msg), "body: %s", msg.Data)
				require.Contains(t, msg.Header.Get(micro.ErrorHeader), tt.desc)
				return
			}
			require.Empty(t, errorCode(msg), "error: %s", msg.Header.Get(micro.ErrorHeader))
			require.Equal(t, !tt.msgpack, record.IsJSON(msg.Data), "reply form")
			r := decodeReplyBody(t, msg.Data, tt.msgpack)
			require.Equal(t, tt.session, r.session)
			require.Equal(t, tt.seq, r.seq)
			require.Len(t, r.messages, tt.messages)
		})
	}
}

func TestService_RejectedAndDiscovery(t *testing.T) {
	url := startNATS(t, 0)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	proj := &fakeProjections{
		rejected: func() []store.Rejection {
			return []store.Rejection{{Subject: "transcripts.a", Session: "a", Seq: 3, Size: 1, Reason: "bad", At: at}}
		},
		stats: func() store.Stats { return store.Stats{Records: 7, Rejected: 1, Sessions: 2, Applied: 8} },
	}
	startService(t, url, proj)
	nc := connect(t, url)

	msg := request(t, nc, "ctxd.rejected", nil, nil)
	require.Empty(t, errorCode(msg))
	var rej []store.Rejection
	require.NoError(t, json.Unmarshal(msg.Data, &rej))
	require.Equal(t, proj.rejected(), rej)

	msg = request(t, nc, "$SRV.PING.ctxd", nil, nil)
	var ping micro.Ping
	require.NoError(t, json.Unmarshal(msg.Data, &ping))
	require.Equal(t, "ctxd", ping.Name)
	require.Equal(t, Version, ping.Version)

	msg = request(t, nc, "$SRV.INFO.ctxd", nil, nil)
	var info micro.Info
	require.NoError(t, json.Unmarshal(msg.Data, &info))
	var subjects []string
	for _, e := range info.Endpoints {
		subject := e.Subject
		if strings.HasPrefix(subject, "ctxd.chunk.") {
			subject = "ctxd.chunk.*" // per instance
		}
		subjects = append(subjects, subject)
	}
	require.ElementsMatch(t, []string{"ctxd.context.*", "ctxd.rejected", "ctxd.chunk.*"}, subjects)

	msg = request(t, nc, "$SRV.STATS.ctxd", nil, nil)
	var stats micro.Stats
	require.NoError(t, json.Unmarshal(msg.Data, &stats))
	require.NotEmpty(t, stats.Endpoints)
	var got store.Stats
	require.NoError(t, json.Unmarshal(stats.Endpoints[0].Data, &got))
	require.Equal(t, proj.stats(), got)
}

// A reply larger than the max payload comes in chunks: the first answers
// the request, and its headers say where to fetch the others, each once.
func TestService_ChunkedReply(t *testing.T) {
	url := startNATS(t, 16<<10)
	big := `{"role":"user","content":"` + strings.Repeat("x", 40<<10) + `"}`
	p := sessionOf(t, []string{`{"role":"user","content":"small"}`, big})
	proj := &fakeProjections{view: viewOf(map[string]*projection.Session{"big": p})}
	startService(t, url, proj)
	nc := connect(t, url)

	for _, asMsgpack := range []bool{false, true} {
		var body []byte
		if asMsgpack {
			body = []byte{0x80}
		}
		msg := request(t, nc, "ctxd.context.big", body, nil)
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
		n, err := strconv.Atoi(msg.Header.Get(HeaderChunks))
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, 3)
		prefix := msg.Header.Get(HeaderChunkSubject)
		require.True(t, strings.HasPrefix(prefix, "ctxd.chunk."), prefix)

		// Chunk numbers run from 1 to n-1.
		for _, k := range []string{"0", "-1", strconv.Itoa(n), "x"} {
			bad := request(t, nc, prefix+"."+k, nil, nil)
			require.Equal(t, CodeNotFound, errorCode(bad), "chunk %s", k)
		}

		whole := append([]byte(nil), msg.Data...)
		for k := 1; k < n; k++ {
			chunk := request(t, nc, prefix+"."+strconv.Itoa(k), nil, nil)
			require.Empty(t, errorCode(chunk), chunk.Header.Get(micro.ErrorHeader))
			require.LessOrEqual(t, len(chunk.Data), 16<<10)
			whole = append(whole, chunk.Data...)
		}
		require.Equal(t, msg.Header.Get(HeaderReplyBytes), strconv.Itoa(len(whole)))
		r := decodeReplyBody(t, whole, asMsgpack)
		require.Equal(t, "2", r.seq)
		requireEqualValues(t, p.Messages(), r.messages, "messages")

		// Fetched: the chunks are gone.
		again := request(t, nc, prefix+".1", nil, nil)
		require.Equal(t, CodeNotFound, errorCode(again))
	}

	// Requests on the instance's chunk subjects for replies it never made.
	msg := request(t, nc, "ctxd.context.big", nil, nil)
	prefix := msg.Header.Get(HeaderChunkSubject)
	instance := prefix[:strings.LastIndexByte(prefix, '.')]
	for _, subj := range []string{instance + ".nope.1", instance + ".1", instance + ".a.b.1"} {
		msg := request(t, nc, subj, nil, nil)
		require.Equal(t, CodeNotFound, errorCode(msg), subj)
	}
}

// A projection that cannot be read is a 500 without internal detail.
func TestService_ViewError(t *testing.T) {
	url := startNATS(t, 0)
	proj := &fakeProjections{
		view: func(context.Context, string, func(*projection.Session)) error {
			return errors.New("load s1: stream unavailable at 10.0.0.5")
		},
	}
	startService(t, url, proj)
	nc := connect(t, url)

	msg := request(t, nc, "ctxd.context.s1", nil, nil)
	require.Equal(t, CodeInternal, errorCode(msg))
	require.Equal(t, "internal error", msg.Header.Get(micro.ErrorHeader))
	require.Empty(t, msg.Data)
}

// A request waiting for min_seq delays neither requests for other
// sessions nor requests for its own session that need no wait.
func TestService_WaitDoesNotDelayOthers(t *testing.T) {
	url := startNATS(t, 0)
	st := store.New()
	st.Advance(5)
	var waiting atomic.Int32 // requests parked in a wait with a timeout
	sessions := map[string]*projection.Session{
		"slow": sessionOf(t, []string{`{"role":"user","content":"a"}`}, 4),
		"fast": sessionOf(t, []string{`{"role":"user","content":"b"}`}, 5),
	}
	proj := &fakeProjections{
		wait: func(ctx context.Context, seq uint64, timeout time.Duration) error {
			if timeout > 0 {
				waiting.Add(1)
				defer waiting.Add(-1)
			}
			return st.Wait(ctx, seq, timeout)
		},
		view: viewOf(sessions),
	}
	startService(t, url, proj)
	nc := connect(t, url)

	// Several requests wait for sequence 10, which is not there yet.
	const parked = 3
	slow := make(chan *nats.Msg, parked)
	for range parked {
		go func() {
			msg, err := nc.Request("ctxd.context.slow", []byte(`{"min_seq":10,"wait_ms":30000}`), 30*time.Second)
			assert.NoError(t, err)
			slow <- msg
		}()
	}
	require.Eventually(t, func() bool { return waiting.Load() == parked }, 20*time.Second, time.Millisecond, "waiting for the requests to wait")

	// Meanwhile every request that needs no wait is answered.
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			session, body, seq := "fast", `{"min_seq":5}`, "5"
			switch i % 4 {
			case 1:
				session, body, seq = "slow", ``, "4"
			case 2:
				session, body, seq = "slow", `{"min_seq":3}`, "4"
			case 3:
				session, body, seq = "other", `{"wait_ms":0}`, "0"
			}
			msg, err := nc.Request("ctxd.context."+session, []byte(body), 30*time.Second)
			if !assert.NoError(t, err) {
				return
			}
			assert.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
			r := decodeReplyBody(t, msg.Data, false)
			assert.Equal(t, seq, r.seq)
		}()
	}
	wg.Wait()
	requireSilent(t, slow, "a waiting request answered")
	require.Equal(t, int32(parked), waiting.Load())

	// The projection catches up: the waiting requests are answered.
	require.NoError(t, st.Wait(context.Background(), 5, 0))
	st.Advance(10)
	for range parked {
		msg := <-slow
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
		r := decodeReplyBody(t, msg.Data, false)
		require.Equal(t, "slow", r.session)
		require.Equal(t, "4", r.seq)
	}
}

// Close answers a waiting request with 504, and returns only once it has.
func TestService_CloseAnswersWaiting(t *testing.T) {
	url := startNATS(t, 0)
	entered := make(chan struct{})
	cancelled := make(chan struct{})
	hold := make(chan struct{})
	proj := &fakeProjections{
		wait: func(ctx context.Context, seq uint64, timeout time.Duration) error {
			if timeout <= 0 {
				return store.ErrWaitExpired
			}
			close(entered)
			<-ctx.Done()
			close(cancelled)
			<-hold // the request is still in hand
			return ctx.Err()
		},
	}
	svc, svcConn := startService(t, url, proj)
	nc := connect(t, url)

	replies := make(chan *nats.Msg, 1)
	go func() {
		msg, err := nc.Request("ctxd.context.s1", []byte(`{"min_seq":10,"wait_ms":30000}`), 30*time.Second)
		assert.NoError(t, err)
		replies <- msg
	}()
	<-entered

	closed := make(chan error, 1)
	go func() { closed <- svc.Close() }()
	<-cancelled
	requireSilent(t, closed, "Close returned with a request in hand")
	requireSilent(t, replies, "the request answered")

	close(hold)
	require.NoError(t, <-closed)
	// Close has answered: the reply is written even if the connection
	// goes away now.
	svcConn.Close()
	msg := <-replies
	require.Equal(t, CodeWaitExpired, errorCode(msg))
	require.Equal(t, "min_seq not reached within wait_ms", msg.Header.Get(micro.ErrorHeader))

	require.NoError(t, svc.Close(), "a second Close is a no-op")
}

// Requests still queued when Close begins are answered at once, and no
// wait starts after Close has returned.
func TestService_CloseWithQueuedRequests(t *testing.T) {
	url := startNATS(t, 0)
	const queued = 5
	var (
		gate        = make(chan struct{}) // holds the first request in its handler
		inHandler   atomic.Int32
		closeReturn atomic.Bool
		lateWaits   atomic.Int32 // waits begun after Close returned
	)
	proj := &fakeProjections{
		wait: func(ctx context.Context, seq uint64, timeout time.Duration) error {
			if timeout <= 0 {
				if inHandler.Add(1) == 1 {
					<-gate
				}
				return store.ErrWaitExpired
			}
			if closeReturn.Load() {
				lateWaits.Add(1)
			}
			<-ctx.Done()
			return ctx.Err()
		},
	}
	svc, svcConn := startService(t, url, proj)

	// Count the requests as they reach the service's connection.
	var arrived atomic.Int32
	_, err := svcConn.Subscribe("ctxd.context.*", func(*nats.Msg) { arrived.Add(1) })
	require.NoError(t, err)
	require.NoError(t, svcConn.Flush())

	nc := connect(t, url)
	replies := make(chan *nats.Msg, queued)
	for range queued {
		go func() {
			msg, err := nc.Request("ctxd.context.s1", []byte(`{"min_seq":10,"wait_ms":30000}`), 30*time.Second)
			assert.NoError(t, err)
			replies <- msg
		}()
	}
	require.Eventually(t, func() bool { return arrived.Load() == queued }, 20*time.Second, time.Millisecond, "waiting for the requests to arrive")
	require.Eventually(t, func() bool { return inHandler.Load() == 1 }, 20*time.Second, time.Millisecond, "waiting for the first request to be in its handler")
	// Every request read before the PONG is queued on the endpoint.
	require.NoError(t, svcConn.Flush())

	require.NoError(t, svc.Close())
	closeReturn.Store(true)
	close(gate)

	for range queued {
		msg := <-replies
		require.Equal(t, CodeWaitExpired, errorCode(msg))
	}
	require.Zero(t, lateWaits.Load(), "waits begun after Close returned")
}

// A request whose reply subject is not an inbox gets no answer: NATS
// does not check a requester's reply subject against its permissions,
// and the service answers with its own, so a reply on $KV.CTXD_*, a
// JetStream API, another session's transcripts subject or ctxd's own
// subjects would write there as ctxd. Nothing is sent there; the request
// counts as an error.
func TestService_RefusesRepliesOutsideInboxes(t *testing.T) {
	url := startNATS(t, 0)
	p := sessionOf(t, []string{`{"role":"user","content":"hi"}`}, 7)
	svc := New(connect(t, url), &fakeProjections{view: viewOf(map[string]*projection.Session{"s1": p})})
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := connect(t, url)
	got := make(chan string, 16)
	for _, spy := range []string{"$KV.>", "$JS.>", "transcripts.>", "ctxd.>", "$SRV.>"} {
		_, err := nc.Subscribe(spy, func(m *nats.Msg) {
			if !strings.HasPrefix(m.Subject, "ctxd.context.") && !strings.HasPrefix(m.Subject, "ctxd.rejected") && !strings.HasPrefix(m.Subject, "$SRV.PING") {
				got <- m.Subject
			}
		})
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	for _, reply := range []string{"$KV.CTXD_CHECKPOINTS.victim", "$JS.API.STREAM.PURGE.TRANSCRIPTS", "transcripts.victim", "ctxd.handback", "$SRV.x"} {
		require.NoError(t, nc.PublishRequest("ctxd.context.s1", reply, nil))
		require.NoError(t, nc.PublishRequest("ctxd.rejected", reply, nil))
	}
	// An inbox still gets its answer, after the refused ones.
	msg := request(t, nc, "ctxd.context.s1", nil, nil)
	require.Empty(t, errorCode(msg))
	require.NoError(t, nc.Flush())
	select {
	case subj := <-got:
		t.Fatalf("an answer was sent to %s", subj)
	default:
	}
}
