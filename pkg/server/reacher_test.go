package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/store"
)

// reacher is a Projections whose waits are per session (Reacher), as an
// instance that does not hold the ingest answers: it records what each
// request asked, and answers with its own Viewer.
type reacher struct {
	fakeProjections
	ready atomic.Bool
	mu    sync.Mutex
	asked []string
	reach func(session string, seq uint64, timeout time.Duration) (Viewer, error)
	// reachCtx, when set, is called instead of reach, with the context.
	reachCtx func(ctx context.Context, session string, seq uint64, timeout time.Duration) (Viewer, error)
}

func (r *reacher) Ready(session string, seq uint64) bool { return r.ready.Load() }

func (r *reacher) Reach(ctx context.Context, session string, seq uint64, timeout time.Duration) (Viewer, error) {
	r.mu.Lock()
	r.asked = append(r.asked, fmt.Sprintf("%s %d %v", session, seq, timeout))
	r.mu.Unlock()
	if r.reachCtx != nil {
		return r.reachCtx(ctx, session, seq, timeout)
	}
	return r.reach(session, seq, timeout)
}

type viewerFunc func(ctx context.Context, session string, fn func(p *projection.Session)) error

func (f viewerFunc) View(ctx context.Context, session string, fn func(p *projection.Session)) error {
	return f(ctx, session, fn)
}

// With a Reacher the service asks it, per session, for the min_seq and
// wait_ms of the request, and shows the Viewer it returns: answered on
// the endpoint's goroutine when Ready, on one of its own otherwise.
func TestService_Reacher(t *testing.T) {
	url := startNATS(t, 0)
	p := sessionOf(t, []string{`{"role":"user","content":"hi"}`}, 7)
	proj := &reacher{
		fakeProjections: fakeProjections{view: func(context.Context, string, func(*projection.Session)) error {
			return fmt.Errorf("the Projections' own View is not used")
		}},
		reach: func(session string, seq uint64, _ time.Duration) (Viewer, error) {
			if seq > 7 {
				return nil, fmt.Errorf("%w: not there", store.ErrWaitExpired)
			}
			return viewerFunc(viewOf(map[string]*projection.Session{"s1": p})), nil
		},
	}
	svc := New(connect(t, url), proj)
	svc.Instance = "host:1"
	svc.Role = func() string { return "reader" }
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := connect(t, url)

	for _, ready := range []bool{false, true} {
		proj.ready.Store(ready)
		msg := request(t, nc, "ctxd.context.s1", []byte(`{"min_seq":7,"wait_ms":300}`), nil)
		require.Empty(t, errorCode(msg), "ready %v", ready)
		var r struct {
			Seq uint64 `json:"seq"`
		}
		require.NoError(t, json.Unmarshal(msg.Data, &r))
		require.Equal(t, uint64(7), r.Seq)
	}
	proj.ready.Store(false)
	msg := request(t, nc, "ctxd.context.s1", []byte(`{"min_seq":8,"wait_ms":300}`), nil)
	require.Equal(t, CodeWaitExpired, errorCode(msg))
	require.Equal(t, []string{"s1 7 300ms", "s1 7 0s", "s1 8 300ms"}, proj.asked, "detached: the request's wait; ready: none")

	// Each instance says who it is.
	msg = request(t, nc, "ctxd.rejected", nil, nil)
	require.Equal(t, "host:1", msg.Header.Get(InstanceHeader))
	msg = request(t, nc, "$SRV.STATS.ctxd", nil, nil)
	var stats struct {
		Metadata  map[string]string `json:"metadata"`
		Endpoints []struct {
			Data map[string]any `json:"data"`
		} `json:"endpoints"`
	}
	require.NoError(t, json.Unmarshal(msg.Data, &stats))
	require.Equal(t, "host:1", stats.Metadata["instance"])
	require.Equal(t, "host:1", stats.Endpoints[0].Data["instance"])
	require.Equal(t, "reader", stats.Endpoints[0].Data["role"])
	require.Contains(t, stats.Endpoints[0].Data, "applied", "the store's counters beside them")
}

// A request with timeout_ms is answered within it, whatever the reads
// do: while the stream does not answer (a leader election), a load
// blocks; the request gets 504 at its deadline instead of nothing, and
// requests queued behind a blocked load worker get theirs too. The
// reads go on under the service's context (a load is shared, and serves
// the request asked again). Without timeout_ms the request waits for
// the reads, as before.
func TestService_TimeoutAnswersInTime(t *testing.T) {
	url := startNATS(t, 0)
	release := make(chan struct{})
	var cut atomic.Bool
	proj := &reacher{
		fakeProjections: fakeProjections{view: func(context.Context, string, func(*projection.Session)) error {
			return fmt.Errorf("the Projections' own View is not used")
		}},
		reachCtx: func(ctx context.Context, session string, seq uint64, _ time.Duration) (Viewer, error) {
			select {
			case <-release: // a read that does not end: the timer answers
			case <-ctx.Done():
				cut.Store(true)
			}
			return nil, fmt.Errorf("%w: the stream did not answer", context.DeadlineExceeded)
		},
	}
	svc := New(connect(t, url), proj)
	svc.MaxLoads, svc.LoadQueue = 1, 8
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	t.Cleanup(func() { close(release) })
	nc := connect(t, url)

	// On the load lane (min_seq 0), the first holds the one worker, the
	// second waits in the queue; on the waiters (min_seq past), a third.
	bodies := []string{`{"timeout_ms":200}`, `{"timeout_ms":300}`, `{"min_seq":5,"timeout_ms":250}`}
	replies := make(chan *nats.Msg, len(bodies))
	for i, body := range bodies {
		go func() {
			msg, err := nc.Request(fmt.Sprintf("ctxd.context.s%d", i), []byte(body), 20*time.Second)
			if err != nil {
				msg = &nats.Msg{Data: []byte(err.Error())}
			}
			replies <- msg
		}()
	}
	for range bodies {
		select {
		case msg := <-replies:
			require.Equal(t, CodeWaitExpired, errorCode(msg), "%s", msg.Data)
			require.Contains(t, msg.Header.Get(micro.ErrorHeader), "no answer within timeout_ms")
		case <-time.After(15 * time.Second):
			t.Fatal("a request with timeout_ms got no answer while its read was blocked")
		}
	}
	require.False(t, cut.Load(), "a read is not cut at a request's deadline")

	// Without timeout_ms, the request waits for its read.
	got := make(chan *nats.Msg, 1)
	go func() {
		msg, err := nc.Request("ctxd.context.t", nil, 20*time.Second)
		if err == nil {
			got <- msg
		}
		close(got)
	}()
	select {
	case msg := <-got:
		t.Fatalf("answered without timeout_ms while the read is blocked: %v %s", msg.Header, msg.Data)
	case <-time.After(time.Second): // a window for the answer that must not come
	}
}

// A read of the stream that times out by its own bound (a leader
// election) is a 504 that says so, not a 500.
func TestService_StreamTimeoutIs504(t *testing.T) {
	url := startNATS(t, 0)
	proj := &reacher{
		fakeProjections: fakeProjections{view: func(context.Context, string, func(*projection.Session)) error {
			return fmt.Errorf("the Projections' own View is not used")
		}},
		reach: func(string, uint64, time.Duration) (Viewer, error) {
			return nil, fmt.Errorf("store: load s: checkpoint s: %w", context.DeadlineExceeded)
		},
	}
	svc := New(connect(t, url), proj)
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	msg := request(t, connect(t, url), "ctxd.context.s", nil, nil)
	require.Equal(t, CodeWaitExpired, errorCode(msg))
	require.Contains(t, msg.Header.Get(micro.ErrorHeader), "the stream did not answer in time")
}

// A session not in the cache is loaded by the Viewer's View (store.View),
// after Reach: a request with timeout_ms is answered at its deadline
// while that load blocks too.
func TestService_TimeoutCoversTheLoad(t *testing.T) {
	url := startNATS(t, 0)
	release := make(chan struct{})
	proj := &reacher{
		fakeProjections: fakeProjections{view: func(context.Context, string, func(*projection.Session)) error {
			return fmt.Errorf("the Projections' own View is not used")
		}},
		reach: func(string, uint64, time.Duration) (Viewer, error) {
			return viewerFunc(func(context.Context, string, func(*projection.Session)) error {
				<-release // a load the stream does not answer
				return fmt.Errorf("store: load: %w", context.DeadlineExceeded)
			}), nil
		},
	}
	svc := New(connect(t, url), proj)
	svc.MaxLoads, svc.LoadQueue = 1, 8
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	t.Cleanup(func() { close(release) })
	msg, err := connect(t, url).Request("ctxd.context.s1", []byte(`{"timeout_ms":200}`), 15*time.Second)
	require.NoError(t, err, "no answer while the load blocked")
	require.Equal(t, CodeWaitExpired, errorCode(msg))
	require.Contains(t, msg.Header.Get(micro.ErrorHeader), "no answer within timeout_ms")
}

// Close waits for the timers of the requests it holds: no answer is
// sent after it returns, even by a timer that fired as Close ended the
// waits.
func TestService_CloseWaitsForTimers(t *testing.T) {
	url := startNATS(t, 0)
	nc := connect(t, url)
	for range 5 {
		proj := &reacher{
			fakeProjections: fakeProjections{view: func(context.Context, string, func(*projection.Session)) error { return nil }},
			reachCtx: func(ctx context.Context, _ string, _ uint64, _ time.Duration) (Viewer, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
		}
		svc := New(connect(t, url), proj)
		var sending atomic.Int32
		var after atomic.Bool
		var closed atomic.Bool
		svc.Observe = func(endpoint, _ string, _ time.Duration) {
			if endpoint != "context" {
				return
			}
			sending.Add(1)
			time.Sleep(50 * time.Millisecond) // an answer slow to leave
			if closed.Load() {
				after.Store(true)
			}
			sending.Add(-1)
		}
		require.NoError(t, svc.Open())
		for i := range 10 {
			require.NoError(t, nc.PublishRequest(fmt.Sprintf("ctxd.context.s%d", i), nc.NewInbox(),
				[]byte(`{"min_seq":5,"wait_ms":10000,"timeout_ms":10000}`)))
		}
		require.NoError(t, nc.Flush())
		require.Eventually(t, func() bool {
			proj.mu.Lock()
			defer proj.mu.Unlock()
			return len(proj.asked) == 10
		}, 10*time.Second, 5*time.Millisecond, "every request waits")
		require.NoError(t, svc.Close())
		closed.Store(true)
		require.Zero(t, sending.Load(), "an answer still being sent after Close returned")
		require.False(t, after.Load())
	}
}
