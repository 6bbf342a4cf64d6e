package server

import (
	"errors"
	"runtime"

	"github.com/nats-io/nats.go/micro"
)

// How requests are handled.
//
// The endpoint's subscription delivers requests one at a time, on one
// goroutine. What it does with each decides whether one slow request
// delays the others:
//
//   - A request for a session held in the cache (or remembered as having
//     no records), needing no wait, is answered right there: a lookup,
//     the cached reply, one write. That is the hot path, and it pays
//     nothing for the rest.
//   - A request for a session not in the cache needs a load (a checkpoint
//     and a read of the session's subject), which may take milliseconds or
//     time out. It goes to the load lane: MaxLoads workers and a queue of
//     LoadQueue requests. When the queue is full the request is refused
//     at once with 503: queueing more would only answer it later than its
//     client waits, and delay every request queued behind it.
//   - A request waiting for min_seq parks in its own goroutine, at most
//     MaxWaiters of them (waiters.go); past that it is refused at once
//     with 503.
//   - A reply of LargeReplyBytes or more goes out on a connection of its
//     own, written off the endpoint's goroutine (bulk.go).
//   - A reply too large for one message goes in chunks (chunks.go).
//
// Loads of one session are shared: however many requests ask for a
// session being loaded, the store reads it once and all of them wait for
// that load (store.View).

// Defaults of the request lanes.
var (
	// DefaultMaxLoads is the number of requests loading a session at
	// once: loads wait on NATS more than they use a CPU, so two per
	// core. More let a flood of loads take the CPU from the requests
	// answered from memory (docs/PERFORMANCE.md).
	DefaultMaxLoads = max(4, 2*runtime.GOMAXPROCS(0))
	// DefaultLoadQueue is how many requests wait for a load worker before
	// the next is refused.
	DefaultLoadQueue = 1024
)

// errBusy: the load lane's queue is full.
var errBusy = errors.New("too many requests for sessions not in the cache")

// loadedChecker is implemented by projections that can tell a session
// answered from memory from one a request would load; without it every
// request takes the load lane.
type loadedChecker interface {
	// Loaded reports whether View would answer the session from memory
	// now, without waiting for any lock.
	Loaded(session string) bool
}

// job is a request handed to the load lane.
type job struct {
	r       micro.Request // detached
	session string
	req     contextRequest
}

// lane is a fixed pool of workers reading a bounded queue.
type lane struct {
	jobs chan job
}

// start runs n workers on the lane until stop; each calls run for a job.
func (l *lane) start(n, queue int, run func(job), done func()) {
	l.jobs = make(chan job, queue)
	for range n {
		go func() {
			defer done()
			for j := range l.jobs {
				run(j)
			}
		}()
	}
}

// offer queues a job without waiting; false when the queue is full.
func (l *lane) offer(j job) bool {
	select {
	case l.jobs <- j:
		return true
	default:
		return false
	}
}

// stop ends the workers once they have run every job queued.
func (l *lane) stop() { close(l.jobs) }

// loaded reports whether a session is held in memory.
func (s *Service) loaded(session string) bool {
	lc, ok := s.proj.(loadedChecker)
	return ok && lc.Loaded(session)
}

// dispatch answers a request that needs no wait: at once when its
// session is held in memory, else on the load lane. It is called on the
// endpoint's goroutine.
func (s *Service) dispatch(r micro.Request, session string, req contextRequest) {
	if s.loaded(session) {
		s.answer(r, session, req, 0)
		return
	}
	s.toLane(r, session, req)
}

// toLane hands a request to the load lane, or refuses it when the lane is
// full.
func (s *Service) toLane(r micro.Request, session string, req contextRequest) {
	s.mu.Lock()
	if s.closing {
		// Draining after Close: answered here, as before the lanes.
		s.mu.Unlock()
		s.answer(r, session, req, 0)
		return
	}
	ok := s.loads.offer(job{r: detach(r, s.nc), session: session, req: req})
	s.mu.Unlock()
	if !ok {
		s.fail(r, errBusy)
	}
}
