package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/store"
)

// A partition endpoint is served only while Route says so, before Open
// (remembered) or after; it answers as ctxd.context does, refuses a bad
// session, and is gone after Close.
func TestService_Route(t *testing.T) {
	url := startNATS(t, 0)
	st := store.New()
	st.Advance(20)
	proj := &fakeProjections{
		wait: st.Wait,
		view: viewOf(map[string]*projection.Session{
			"demo": sessionOf(t, []string{`{"role":"user","content":"hi"}`}, 14),
		}),
	}
	svc := New(connect(t, url), proj)
	svc.Partitions = 16
	svc.Route(3, true) // before Open: served once open
	require.NoError(t, svc.Open())
	nc := connect(t, url)

	want := request(t, nc, "ctxd.context.demo", nil, nil)
	require.Empty(t, errorCode(want))
	got := request(t, nc, "ctxd.p.3.demo", nil, nil)
	require.Empty(t, errorCode(got))
	require.Equal(t, string(want.Data), string(got.Data))
	require.Equal(t, "400", errorCode(request(t, nc, "ctxd.p.3.a*b", nil, nil)))

	_, err := nc.Request("ctxd.p.4.demo", nil, 5*time.Second)
	require.True(t, errors.Is(err, nats.ErrNoResponders), "%v", err)
	svc.Route(4, true)
	require.NoError(t, svc.nc.Flush())
	require.Empty(t, errorCode(request(t, nc, "ctxd.p.4.demo", nil, nil)))
	require.ElementsMatch(t, []int{3, 4}, routed(svc))
	svc.Route(3, false)
	require.NoError(t, svc.nc.Flush())
	_, err = nc.Request("ctxd.p.3.demo", nil, 5*time.Second)
	require.True(t, errors.Is(err, nats.ErrNoResponders), "%v", err)

	require.NoError(t, svc.Close())
	svc.Route(5, true) // after Close: nothing
	require.Empty(t, routed(svc))
	_, err = nc.Request("ctxd.p.4.demo", nil, 5*time.Second)
	require.True(t, errors.Is(err, nats.ErrNoResponders), "%v", err)
}

// Requests already delivered to a partition endpoint when it is turned
// off (the partition moved to another instance) are answered, not
// dropped: the requester would otherwise wait out its timeout.
func TestService_RouteOffAnswersQueued(t *testing.T) {
	url := startNATS(t, 0)
	st := store.New()
	st.Advance(20)
	held := make(chan struct{})
	entered := make(chan struct{}, 16)
	sessions := viewOf(map[string]*projection.Session{
		"demo": sessionOf(t, []string{`{"role":"user","content":"hi"}`}, 14),
	})
	// Loaded: answered on the endpoint's goroutine, so the requests
	// behind the one in hand wait in the subscription.
	proj := &loadedProjections{
		fakeProjections: &fakeProjections{
			wait: st.Wait,
			view: func(ctx context.Context, session string, fn func(*projection.Session)) error {
				entered <- struct{}{}
				<-held
				return sessions(ctx, session, fn)
			},
		},
		loaded: func(string) bool { return true },
	}
	svc := New(connect(t, url), proj)
	svc.Partitions = 16
	svc.Route(3, true)
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := connect(t, url)

	const n = 6
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := nc.Request("ctxd.p.3.demo", nil, 10*time.Second)
			errs <- err
		}()
	}
	<-entered // one request in hand, the others delivered behind it
	require.NoError(t, nc.Flush())
	require.NoError(t, svc.nc.Flush())
	time.Sleep(50 * time.Millisecond)
	svc.Route(3, false)
	close(held)
	for range n {
		require.NoError(t, <-errs)
	}
	require.Len(t, entered, n-1, "every request answered by this service")
	_, err := nc.Request("ctxd.p.3.demo", nil, 5*time.Second)
	require.True(t, errors.Is(err, nats.ErrNoResponders), "%v", err)
}

// Once Close returns, the server no longer sends the partition
// endpoints' requests to the closed service: a request made right after
// finds no responder (or another instance) at once, rather than being
// delivered to a subscription the service no longer reads.
func TestService_CloseStopsRoutesAtOnce(t *testing.T) {
	url := startNATS(t, 0)
	nc := connect(t, url)
	for i := range 50 {
		svc := New(connect(t, url), &fakeProjections{})
		svc.Partitions = 16
		svc.Route(3, true)
		require.NoError(t, svc.Open())
		require.NoError(t, svc.Close())
		for _, subj := range []string{"ctxd.p.3.demo", "ctxd.context.demo"} {
			_, err := nc.Request(subj, nil, 2*time.Second)
			require.True(t, errors.Is(err, nats.ErrNoResponders), "round %d, %s: %v", i, subj, err)
		}
	}
}

// routed lists the partitions whose endpoint the service serves now.
func routed(s *Service) []int {
	rt := &s.routes
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]int, 0, len(rt.subs))
	for k := range rt.subs {
		out = append(out, k)
	}
	return out
}

// Open waits for the server to confirm the partition endpoints with no
// lock held: a route turned on or off meanwhile (the ingest's pin
// hooks) does not wait for the confirmation.
func TestService_RouteWhileOpening(t *testing.T) {
	url := startNATS(t, 0)
	svc := New(connect(t, url), &fakeProjections{})
	svc.Partitions = 16
	svc.Route(3, true)
	entered, release := make(chan struct{}), make(chan struct{})
	svc.routes.flush = func() error {
		close(entered)
		<-release
		return svc.nc.Flush()
	}
	opened := make(chan error, 1)
	go func() { opened <- svc.Open() }()
	<-entered
	free := svc.routes.mu.TryLock()
	if free {
		svc.routes.mu.Unlock()
	}
	close(release)
	require.NoError(t, <-opened)
	t.Cleanup(func() { svc.Close() })
	require.True(t, free, "the routes' lock is held while the server confirms them")
	svc.Route(4, true)
	require.NoError(t, svc.nc.Flush())
	require.ElementsMatch(t, []int{3, 4}, routed(svc))
}
