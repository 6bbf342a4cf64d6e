package server

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/micro"

	"github.com/ctxd/ctxd/pkg/store"
)

// DefaultMaxWaiters bounds the requests waiting for min_seq at once. A
// waiting request costs a few KiB (its message, a goroutine, a timer; see
// docs/PERFORMANCE.md): 10 000 of them are tens of MiB.
const DefaultMaxWaiters = 10_000

// errTooManyWaiters: MaxWaiters requests wait for min_seq already.
var errTooManyWaiters = errors.New("too many requests waiting for min_seq")

// await parks a request until the projections reach its min_seq, then
// answers it, off the endpoint's goroutine so a waiting request never
// delays another. Past MaxWaiters it is refused at once.
func (s *Service) await(r micro.Request, session string, req contextRequest) {
	if _, reads := s.proj.(Reacher); req.wait <= 0 && !reads {
		// Not reached, and no time to wait. (Projections that can read
		// the stream may still answer at once: Reach decides.)
		s.fail(r, store.ErrWaitExpired)
		return
	}
	if n := s.waiting.Add(1); s.MaxWaiters > 0 && n > int64(s.MaxWaiters) {
		s.waiting.Add(-1)
		s.fail(r, errTooManyWaiters)
		return
	}
	if !s.track() {
		s.waiting.Add(-1)
		s.fail(r, fmt.Errorf("%w: shutting down", store.ErrWaitExpired))
		return
	}
	d := detach(r, s.nc)
	req = s.bound(d, req)
	go func() {
		defer s.wg.Done()
		defer s.waiting.Add(-1)
		s.answer(d, session, req, req.wait, false)
	}()
}
