package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go/micro"

	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// A request that says how long its client waits (timeout_ms) is answered
// within that time: with its context, or with an error at its deadline.
// Without it, a request whose session must be read from the stream while
// JetStream elects a leader (a node down) waits for the stream as long as
// the reads allow (store.LoadTimeout), long after its client gave up, and
// the requests queued behind it on the load lane wait as long.
//
// A timer answers 504 at the deadline whatever the reads are doing.
// Whoever answers first claims the request; the other sends nothing. The
// reads themselves go on under the service's context: a load is shared
// by every request of the session (store.View), and one cut at a short
// deadline would be cut again at the next, so a session that takes
// longer to load than its clients wait would never load; finished, it
// serves the request that asks again. A request still queued at its
// deadline is dropped when a worker takes it.

// errNoTime: the request's timeout_ms passed before the stream answered
// what the context needs.
var errNoTime = errors.New("no answer within timeout_ms")

// errStreamTimeout: a read of the stream or of ctxd's buckets got no
// answer within its own bound.
var errStreamTimeout = errors.New("the stream did not answer in time")

// bounded is the deadline of a request answered off the endpoint's
// goroutine: its timer's context.
type bounded struct {
	ctx     context.Context
	cancel  context.CancelFunc
	claimed atomic.Bool
	stop    func() bool   // stops the timer before it fires
	fired   chan struct{} // closed once the timer's func has returned
}

// bound returns req bounded by its deadline, when it has one: the timer
// answers r at the deadline unless the request was claimed. r must be
// detached: the timer answers it from its own goroutine.
func (s *Service) bound(r micro.Request, req contextRequest) contextRequest {
	if req.deadline.IsZero() {
		return req
	}
	b := &bounded{fired: make(chan struct{})}
	b.ctx, b.cancel = context.WithDeadline(s.ctx, req.deadline)
	b.stop = context.AfterFunc(b.ctx, func() {
		defer close(b.fired)
		// Canceled, not expired: the request was answered.
		if s.ctx.Err() == nil && !errors.Is(b.ctx.Err(), context.DeadlineExceeded) {
			return
		}
		if !b.claimed.CompareAndSwap(false, true) {
			return
		}
		err := fmt.Errorf("%w (%v)", errNoTime, req.timeout)
		if s.ctx.Err() != nil {
			err = fmt.Errorf("%w: shutting down", store.ErrWaitExpired)
		}
		s.fail(r, err)
	})
	req.bounded = b
	return req
}

// release stops the request's timer once it is answered, or waits for
// it if it fired: whoever holds the request (a load worker, a waiter,
// counted in the service's WaitGroup) holds its timer too, so no
// answer is sent after Close returns.
func (req contextRequest) release() {
	if b := req.bounded; b != nil {
		if !b.stop() {
			<-b.fired
		}
		b.cancel()
	}
}

// claim reports whether the caller may answer the request: false once
// its deadline has answered it.
func (req contextRequest) claim() bool {
	return req.bounded == nil || req.bounded.claimed.CompareAndSwap(false, true)
}

// expired reports whether the request was answered at its deadline
// already.
func (req contextRequest) expired() bool {
	return req.bounded != nil && req.bounded.claimed.Load()
}

// An answer goes to the request's reply subject, published with the
// service's own permissions: NATS does not check the reply subject a
// requester gives against the requester's. So the service answers only
// on subjects that may be inboxes, never on a subject a stream or ctxd
// itself listens on: $-subjects ($KV.CTXD_* buckets, $JS.API, $SRV),
// transcripts.> (another session's records) and ctxd.> (its own
// endpoints and the handback). A request that names one is dropped.

// replyAllowed reports whether a request's reply subject may be
// answered; it logs the first refusals, then every power of two.
func (s *Service) replyAllowed(subj, reply string) bool {
	if reply != "" && reply[0] != '$' && !strings.HasPrefix(reply, subject.TranscriptsPrefix) && !strings.HasPrefix(reply, "ctxd.") {
		return true
	}
	if n := s.refusedReplies.Add(1); n&(n-1) == 0 {
		s.log("request dropped: its reply subject is not an inbox", "subject", subj, "reply", reply, "dropped", n)
	}
	return false
}
