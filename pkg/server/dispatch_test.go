package server

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/store"
)

// loadedProjections is a fakeProjections that says which sessions are
// held in memory.
type loadedProjections struct {
	*fakeProjections
	loaded func(session string) bool
}

func (p *loadedProjections) Loaded(session string) bool { return p.loaded(session) }

// blockedLoads serves "hot" at once, as a session held in memory, and
// holds every other session's view until release is closed, as a load
// that gets no answer; entered counts the views held.
func blockedLoads(t *testing.T, entered *atomic.Int32, release <-chan struct{}) *loadedProjections {
	hot := sessionOf(t, []string{`{"role":"user","content":"hi"}`}, 7)
	return &loadedProjections{
		fakeProjections: &fakeProjections{
			view: func(ctx context.Context, session string, fn func(*projection.Session)) error {
				if session == "hot" {
					fn(hot)
					return nil
				}
				entered.Add(1)
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				fn(nil)
				return nil
			},
		},
		loaded: func(session string) bool { return session == "hot" },
	}
}

// sendAsync sends a request and returns the channel its reply arrives on.
func sendAsync(t *testing.T, nc *nats.Conn, subj string, body []byte) <-chan *nats.Msg {
	t.Helper()
	inbox := nats.NewInbox()
	ch := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe(inbox, ch)
	require.NoError(t, err)
	t.Cleanup(func() { sub.Unsubscribe() })
	require.NoError(t, nc.PublishRequest(subj, inbox, body))
	require.NoError(t, nc.Flush())
	return ch
}

// Requests that load their session are handled side by side, and a
// request for a session held in memory is answered while they wait.
func TestService_LoadsDoNotDelayOthers(t *testing.T) {
	url := startNATS(t, 0)
	var entered atomic.Int32
	release := make(chan struct{})
	startService(t, url, blockedLoads(t, &entered, release))
	nc := connect(t, url)

	const loads = 4
	var pending []<-chan *nats.Msg
	for i := range loads {
		pending = append(pending, sendAsync(t, nc, "ctxd.context.cold"+strings.Repeat("x", i), nil))
	}
	require.Eventually(t, func() bool { return entered.Load() == loads }, 10*time.Second, time.Millisecond,
		"loads in progress: %d of %d", entered.Load(), loads)

	for range 10 {
		msg := request(t, nc, "ctxd.context.hot", nil, nil)
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
		require.Equal(t, "7", decodeReplyBody(t, msg.Data, false).seq)
	}
	for _, ch := range pending {
		requireSilent(t, ch, "a blocked load answered")
	}

	close(release)
	for _, ch := range pending {
		msg := <-ch
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
		require.Equal(t, "0", decodeReplyBody(t, msg.Data, false).seq)
	}
}

// Past MaxLoads working and LoadQueue queued, a request that would load
// is refused at once with 503; a request for a session in memory is not.
func TestService_RefusesLoadsPastTheQueue(t *testing.T) {
	url := startNATS(t, 0)
	var entered atomic.Int32
	release := make(chan struct{})
	nc0 := connect(t, url)
	svc := New(nc0, blockedLoads(t, &entered, release))
	svc.MaxLoads, svc.LoadQueue = 1, 1
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := connect(t, url)

	first := sendAsync(t, nc, "ctxd.context.a", nil)
	require.Eventually(t, func() bool { return entered.Load() == 1 }, 10*time.Second, time.Millisecond)
	queued := sendAsync(t, nc, "ctxd.context.b", nil) // handled in order: queued, then
	refused := request(t, nc, "ctxd.context.c", nil, nil)
	require.Equal(t, CodeBusy, errorCode(refused))
	require.Equal(t, "too many requests for sessions not in the cache: retry later", refused.Header.Get(micro.ErrorHeader))
	hot := request(t, nc, "ctxd.context.hot", nil, nil)
	require.Empty(t, errorCode(hot))

	close(release)
	for _, ch := range []<-chan *nats.Msg{first, queued} {
		msg := <-ch
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
	}
	require.Empty(t, errorCode(request(t, nc, "ctxd.context.c", nil, nil)), "answered once the lane has room")
}

// Past MaxWaiters waiting for min_seq, a request that would wait is
// refused at once with 503; those waiting are answered as usual, and
// their places free again.
func TestService_BoundsWaiters(t *testing.T) {
	url := startNATS(t, 0)
	st := store.New()
	st.Advance(5)
	var waiting atomic.Int32
	proj := &fakeProjections{
		wait: func(ctx context.Context, seq uint64, timeout time.Duration) error {
			if timeout > 0 {
				waiting.Add(1)
				defer waiting.Add(-1)
			}
			return st.Wait(ctx, seq, timeout)
		},
		view: viewOf(map[string]*projection.Session{"s": sessionOf(t, []string{`{"role":"user","content":"a"}`}, 4)}),
	}
	nc0 := connect(t, url)
	svc := New(nc0, proj)
	svc.MaxWaiters = 3
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := connect(t, url)

	var parked []<-chan *nats.Msg
	for range 3 {
		parked = append(parked, sendAsync(t, nc, "ctxd.context.s", []byte(`{"min_seq":10,"wait_ms":30000}`)))
	}
	require.Eventually(t, func() bool { return waiting.Load() == 3 }, 10*time.Second, time.Millisecond)

	refused := request(t, nc, "ctxd.context.s", []byte(`{"min_seq":10,"wait_ms":30000}`), nil)
	require.Equal(t, CodeBusy, errorCode(refused))
	require.Equal(t, "too many requests waiting for min_seq: retry later, or with wait_ms 0", refused.Header.Get(micro.ErrorHeader))
	// Operators see refusals in $SRV.STATS.
	var stats micro.Stats
	require.NoError(t, json.Unmarshal(request(t, nc, "$SRV.STATS.ctxd", nil, nil).Data, &stats))
	for _, e := range stats.Endpoints {
		if e.Name == "context" {
			require.Equal(t, 1, e.NumErrors)
			require.Contains(t, e.LastError, "503")
		}
	}
	// A request that need not wait is answered.
	require.Empty(t, errorCode(request(t, nc, "ctxd.context.s", []byte(`{"min_seq":5}`), nil)))
	// So is one that cannot wait: wait_ms 0 fails at once, as always.
	require.Equal(t, CodeWaitExpired, errorCode(request(t, nc, "ctxd.context.s", []byte(`{"min_seq":10,"wait_ms":0}`), nil)))

	st.Advance(10)
	for _, ch := range parked {
		msg := <-ch
		require.Empty(t, errorCode(msg), msg.Header.Get(micro.ErrorHeader))
		require.Equal(t, "4", decodeReplyBody(t, msg.Data, false).seq)
	}
	require.Eventually(t, func() bool { return svc.waiting.Load() == 0 }, 10*time.Second, time.Millisecond)
	more := sendAsync(t, nc, "ctxd.context.s", []byte(`{"min_seq":11,"wait_ms":30000}`))
	require.Eventually(t, func() bool { return waiting.Load() == 1 }, 10*time.Second, time.Millisecond, "a waiter is taken again")
	st.Advance(11)
	require.Empty(t, errorCode(<-more))
}

// Answers of no records on the load lane are paced: a flood of requests
// for random sessions gets MissBurst answers, then one per 1/MissRate,
// up to LoadQueue waiting and refused past that; a session held in
// memory, or one with records loaded on the lane, is answered meanwhile.
func TestService_PacesAnswersOfNoRecords(t *testing.T) {
	url := startNATS(t, 0)
	cold := sessionOf(t, []string{`{"role":"user","content":"stored"}`}, 3)
	release := make(chan struct{})
	var entered atomic.Int32
	proj := blockedLoads(t, &entered, release)
	close(release) // unknown sessions: answered at once with no records
	view := proj.view
	proj.view = func(ctx context.Context, session string, fn func(*projection.Session)) error {
		if session == "cold" {
			fn(cold)
			return nil
		}
		return view(ctx, session, fn)
	}
	nc0 := connect(t, url)
	svc := New(nc0, proj)
	svc.MaxLoads, svc.LoadQueue = 1, 3
	svc.MissRate, svc.MissBurst = 0.01, 1 // one answer, then one per 100 s
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := connect(t, url)

	first := request(t, nc, "ctxd.context.u0", nil, nil)
	require.Empty(t, errorCode(first))
	require.Contains(t, string(first.Data), `"seq":0,"messages":[]`)
	var delayed []<-chan *nats.Msg
	for i := range 3 {
		delayed = append(delayed, sendAsync(t, nc, "ctxd.context.q"+strings.Repeat("x", i), nil))
	}
	// The lane has handed all three to the pace: its queue is empty, so
	// what refuses the next is the pace, and the lane is free for cold.
	require.Eventually(t, func() bool { return svc.delayed.Load() == 3 }, 10*time.Second, time.Millisecond)
	refused := request(t, nc, "ctxd.context.u2", nil, nil)
	require.Equal(t, CodeBusy, errorCode(refused), "past LoadQueue waiting for the pace")
	for _, ch := range delayed {
		requireSilent(t, ch, "a paced answer")
	}
	hot := request(t, nc, "ctxd.context.hot", nil, nil)
	require.Empty(t, errorCode(hot), "a session in memory is answered at once")
	loaded := request(t, nc, "ctxd.context.cold", nil, nil)
	require.Empty(t, errorCode(loaded), "a session with records is loaded on the lane at once")
	require.Contains(t, string(loaded.Data), "stored")

	// Close sends the answers waiting for the pace at once.
	require.NoError(t, svc.Close())
	for _, ch := range delayed {
		select {
		case msg := <-ch:
			require.Empty(t, errorCode(msg))
			require.Contains(t, string(msg.Data), `"messages":[]`)
		case <-time.After(30 * time.Second):
			t.Fatal("an answer waiting for the pace was not sent at Close")
		}
	}
}
