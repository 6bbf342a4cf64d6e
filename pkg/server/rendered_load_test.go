package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/replytest"
	"github.com/ctxd/ctxd/internal/sessiongen"
	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
	"github.com/ctxd/ctxd/pkg/store"
)

// growing is a session whose records are applied while it is fetched.
type growing struct {
	id      string
	recs    []any
	opt     projection.Options
	p       *projection.Session // guarded by the test's mu
	applied atomic.Uint64
	formats [3]render.Format
}

// rebuilt returns the session's projection made anew from its records up
// to seq: what a load of the session from the stream would hold.
func (g *growing) rebuilt(seq uint64) *projection.Session {
	p := projection.New(g.opt)
	for i := range seq {
		p.Apply(i+1, g.recs[i])
	}
	return p
}

// seenReply is a reply received for a request, by the hash of its bytes.
type seenReply struct {
	session string
	seq     uint64
	key     replyKey
}

// TestService_RenderedRepliesUnderLoad fetches sessions while their
// records are applied, from many clients at once, in three formats in
// turn, as JSON and msgpack: small replies, replies sent on the large
// replies' connection, replies in chunks pushed or held for fetches,
// requests answered off the endpoint's goroutine (waiting for min_seq,
// or on the load lane), requests with a deadline of a millisecond, and
// sessions evicted and loaded again. Every reply is a fresh rendering's
// of the session at its seq, byte for byte, whichever buffer it was
// written in.
func TestService_RenderedRepliesUnderLoad(t *testing.T) {
	for _, tc := range []loadCase{
		// Most replies past the max payload: chunks pushed and fetched.
		{name: "chunks", maxPayload: 16 << 10, large: 4 << 10, cacheBytes: DefaultRenderCacheBytes, formats: 3},
		{name: "chunks, tiny cache", maxPayload: 16 << 10, large: 4 << 10, cacheBytes: 24 << 10, formats: 3},
		// Every client on the same format of the same sessions, each reply
		// sent whole: most are written over the one before.
		{name: "one format", large: 4 << 10, cacheBytes: DefaultRenderCacheBytes, formats: 1},
		{name: "one format, all small", cacheBytes: DefaultRenderCacheBytes, formats: 1},
	} {
		t.Run(tc.name, func(t *testing.T) { renderedUnderLoad(t, tc) })
	}
}

type loadCase struct {
	name       string
	maxPayload int32 // the server's; 0: the default
	large      int   // LargeReplyBytes; 0: the default
	cacheBytes int
	formats    int // formats asked of each session
}

func renderedUnderLoad(t *testing.T, tc loadCase) {
	url := startNATS(t, tc.maxPayload)

	var sessions []*growing
	for i := range 3 {
		s := &growing{id: fmt.Sprint("w", i)}
		// Screenshots make the replies grow past the large replies'
		// threshold and then past the max payload.
		s.recs = workload.New(uint64(i+1), workload.Default.WithScreenshots(6<<10, 3)).Records(50)
		sessions = append(sessions, s)
	}
	for i := range 2 {
		r := rand.New(rand.NewPCG(uint64(i+7), 11))
		g := sessiongen.New(r, sessiongen.Rules{Convert: projection.Convert, IsValidCompaction: projection.IsValidCompaction})
		sessions = append(sessions, &growing{id: fmt.Sprint("g", i), recs: g.Session(60),
			opt: projection.Options{BrowserTools: g.BrowserTools()}})
	}
	byID := map[string]*growing{}
	for i, s := range sessions {
		s.p = projection.New(s.opt)
		fs := render.Formats[1:]
		s.formats = [3]render.Format{fs[i%4], fs[(i+1)%4], fs[(i+2)%4]}
		byID[s.id] = s
	}

	var mu sync.Mutex // the service's views, the appends and evictions take turns
	var evicted atomic.Bool
	var top atomic.Uint64 // every session holds its records up to top
	proj := &loadedProjections{
		fakeProjections: &fakeProjections{
			view: func(_ context.Context, session string, fn func(*projection.Session)) error {
				mu.Lock()
				defer mu.Unlock()
				s := byID[session]
				if s == nil {
					fn(nil)
					return nil
				}
				fn(s.p)
				return nil
			},
			wait: func(ctx context.Context, seq uint64, timeout time.Duration) error {
				deadline := time.Now().Add(timeout)
				for {
					if top.Load() >= seq {
						return nil
					}
					if timeout <= 0 || time.Now().After(deadline) {
						return store.ErrWaitExpired
					}
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(time.Millisecond):
					}
				}
			},
		},
		// g1 is answered on the load lane, off the endpoint's goroutine.
		loaded: func(session string) bool { return session != "g1" || !evicted.Load() },
	}
	nc := connect(t, url)
	svc := New(nc, proj)
	svc.RenderCacheBytes = tc.cacheBytes
	if tc.large > 0 {
		svc.LargeReplyBytes = tc.large
	}
	svc.PushBytes = 1 << 20
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })

	var seenMu sync.Mutex
	seen := map[seenReply]map[[32]byte]int{}
	var replies, errs, timedOut, chunked atomic.Int64
	fail := make(chan error, 1)
	quit := make(chan struct{}) // closed at the first failure
	var once sync.Once
	report := func(err error) {
		once.Do(func() {
			fail <- err
			close(quit)
		})
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The appender: one record of each session at a time, in turn.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(stop)
		for step := 0; ; step++ {
			more := false
			for _, s := range sessions {
				if step >= len(s.recs) {
					continue
				}
				more = true
				mu.Lock()
				s.p.Apply(uint64(step+1), s.recs[step])
				s.applied.Store(uint64(step + 1))
				mu.Unlock()
			}
			if !more {
				return
			}
			top.Store(uint64(step + 1))
			// Let the clients fetch a few times between records.
			deadline := time.Now().Add(30 * time.Second)
			for n := replies.Load() + errs.Load(); replies.Load()+errs.Load() < n+12; {
				select {
				case <-quit:
					return
				case <-time.After(time.Millisecond):
				}
				if time.Now().After(deadline) {
					report(errors.New("no replies for 30 s"))
					return
				}
			}
		}
	}()
	// The evictor: now and then a session's projection is dropped and
	// loaded again, its kept replies with it.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(5, 5))
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			s := sessions[r.IntN(len(sessions))]
			mu.Lock()
			s.p = s.rebuilt(s.applied.Load())
			mu.Unlock()
			evicted.Store(r.IntN(2) == 0)
		}
	}()

	const clients = 8
	// Clients asking for a min_seq not reached yet wait for the appender,
	// which goes on once the others have had a few replies: at most
	// clients-2 of them wait at a time, or all could, and the appender
	// with them, until their wait_ms ran out.
	var waiting atomic.Int32
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cnc, err := nats.Connect(url)
			if err != nil {
				report(err)
				return
			}
			defer cnc.Close()
			r := rand.New(rand.NewPCG(uint64(w), 99))
			for {
				select {
				case <-stop:
					return
				case <-quit:
					return
				default:
				}
				s := sessions[r.IntN(len(sessions))]
				key := replyKey{format: string(s.formats[r.IntN(tc.formats)]), msgpack: r.IntN(2) == 0}
				if r.IntN(6) == 0 {
					key.budget, key.hasBudget = 500, true
				}
				fields := []any{"format", key.format}
				if key.hasBudget {
					fields = append(fields, "budget_tokens", int64(key.budget))
				}
				short := r.IntN(5) == 0
				if short {
					fields = append(fields, "timeout_ms", int64(1))
				}
				var minSeq uint64
				if n := s.applied.Load(); r.IntN(4) == 0 && n < uint64(len(s.recs)) {
					if waiting.Add(1) <= clients-2 {
						minSeq = n + 1
						fields = append(fields, "min_seq", int64(minSeq), "wait_ms", int64(5000))
					} else {
						waiting.Add(-1)
					}
				}
				var body []byte
				if key.msgpack {
					body, err = record.AppendMsgpack(nil, record.NewMap(fields...))
				} else {
					body, err = record.AppendJSON(nil, record.NewMap(fields...))
				}
				if err != nil {
					report(err)
					return
				}
				push := r.IntN(2) == 0
				data, code, err := fetchReply(cnc, "ctxd.context."+s.id, body, push, &chunked)
				if minSeq > 0 {
					waiting.Add(-1)
				}
				if err != nil {
					report(fmt.Errorf("%s %+v: %w", s.id, key, err))
					return
				}
				switch {
				case code == CodeWaitExpired && short:
					timedOut.Add(1)
					errs.Add(1)
					continue
				case code != "":
					report(fmt.Errorf("%s %+v: error %s", s.id, key, code))
					return
				}
				seq, err := replySeq(data, key.msgpack)
				if err != nil {
					report(fmt.Errorf("%s %+v: %w", s.id, key, err))
					return
				}
				if seq < minSeq {
					report(fmt.Errorf("%s %+v: seq %d, min_seq %d", s.id, key, seq, minSeq))
					return
				}
				plain, err := replytest.Plain(data)
				if err != nil {
					report(fmt.Errorf("%s %+v: %w", s.id, key, err))
					return
				}
				k := seenReply{s.id, seq, key}
				seenMu.Lock()
				if seen[k] == nil {
					seen[k] = map[[32]byte]int{}
				}
				seen[k][sha256.Sum256(plain)]++
				seenMu.Unlock()
				replies.Add(1)
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-fail:
		t.Fatal(err)
	default:
	}
	t.Logf("%d replies (%d in chunks), %d timed out, %d kinds", replies.Load(), chunked.Load(), timedOut.Load(), len(seen))
	if tc.maxPayload > 0 {
		require.Positive(t, chunked.Load(), "some replies in chunks")
	}

	// Each reply is the fresh rendering of its session at its seq.
	wrong := 0
	for k, hashes := range seen {
		s := byID[k.session]
		p := s.rebuilt(k.seq)
		req := contextRequest{format: render.Format(k.key.format), msgpack: k.key.msgpack, budget: k.key.budget, hasBudget: k.key.hasBudget}
		var want []byte
		var err error
		if req.msgpack {
			want, err = appendRenderedMsgpack(nil, s.id, p, req, nil)
		} else {
			want, err = appendRenderedJSON(nil, s.id, p, req, nil)
		}
		require.NoError(t, err)
		h := sha256.Sum256(want)
		for got, n := range hashes {
			if got != h {
				wrong += n
				t.Errorf("%s at seq %d, %+v: %d replies are not the fresh rendering", k.session, k.seq, k.key, n)
			}
		}
	}
	require.Zero(t, wrong, "wrong replies")
}

// fetchReply sends a context request and returns the whole reply, its
// chunks pushed or fetched, or the error code it was answered with.
func fetchReply(nc *nats.Conn, subj string, body []byte, push bool, chunked *atomic.Int64) ([]byte, string, error) {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, "", err
	}
	defer sub.Unsubscribe()
	hdr := nats.Header{}
	if push {
		hdr.Set(HeaderAcceptChunks, "push")
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: subj, Reply: inbox, Data: body, Header: hdr}); err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return nil, "", err
	}
	if code := first.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, code, nil
	}
	nh := first.Header.Get(HeaderChunks)
	if nh == "" {
		return first.Data, "", nil
	}
	chunked.Add(1)
	n, err := strconv.Atoi(nh)
	if err != nil {
		return nil, "", err
	}
	whole := append([]byte(nil), first.Data...)
	prefix := first.Header.Get(HeaderChunkSubject)
	for k := 1; k < n; k++ {
		var m *nats.Msg
		if prefix == "" {
			m, err = sub.NextMsgWithContext(ctx)
		} else {
			m, err = nc.RequestWithContext(ctx, prefix+"."+strconv.Itoa(k), nil)
		}
		if err != nil {
			return nil, "", fmt.Errorf("chunk %d of %d: %w", k, n, err)
		}
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			return nil, "", fmt.Errorf("chunk %d of %d: error %s %s", k, n, code, m.Header.Get(micro.ErrorHeader))
		}
		whole = append(whole, m.Data...)
	}
	if got := strconv.Itoa(len(whole)); got != first.Header.Get(HeaderReplyBytes) {
		return nil, "", fmt.Errorf("%s bytes in chunks, %s said", got, first.Header.Get(HeaderReplyBytes))
	}
	return whole, "", nil
}

// replySeq returns the seq a reply says.
func replySeq(data []byte, asMsgpack bool) (uint64, error) {
	var v any
	var err error
	if asMsgpack {
		v, err = record.DecodeMsgpack(data)
	} else {
		v, err = record.DecodeJSON(data)
	}
	if err != nil {
		return 0, fmt.Errorf("reply undecodable: %w", err)
	}
	m, ok := v.(*record.Map)
	if !ok {
		return 0, errors.New("reply not a map")
	}
	s, ok := record.IntegerString(field(m, "seq"))
	if !ok {
		return 0, fmt.Errorf("reply seq %v", field(m, "seq"))
	}
	return strconv.ParseUint(s, 10, 64)
}
