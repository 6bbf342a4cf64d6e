package server

import (
	"errors"
	"runtime"
	"time"

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
//   - An answer of no records from the load lane (a session never
//     written to) is paced (pace): a flood of random ids is answered at
//     the pace, not as fast as it asks.
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

// Defaults of the pacing of answers of no records on the load lane.
const (
	DefaultMissRate  = 200
	DefaultMissBurst = 50
)

// pace sends an answer of no records from the load lane (a session never
// written to, a random id) when the pace allows: at once within
// MissBurst, else from a goroutine of its own once the pace has room, at
// most LoadQueue of them waiting; past that the request is refused with
// 503. Close sends those waiting at once.
//
// A flood of requests for random sessions is answered cheaply (each
// costs no read where the store knows every session, and one checkpoint
// lookup and one read where it does not), but its clients ask again as
// soon as they are answered: unpaced, the flood takes whatever CPU its
// answers free, and every other request on the machine waits behind it
// (docs/PERFORMANCE.md). Pacing the answers paces the clients. Nothing
// else waits for it: the load lane's workers go on with the next
// request, a session with records is answered as soon as it is loaded,
// and a client that fetches a new session before its first record waits
// only while such answers come faster than the pace.
func (s *Service) pace(r micro.Request, send func(micro.Request)) {
	if s.misses == nil {
		send(r)
		return
	}
	res := s.misses.Reserve()
	d := res.Delay()
	if d == 0 {
		send(r)
		return
	}
	if s.delayed.Add(1) > int64(max(1, s.LoadQueue)) {
		s.delayed.Add(-1)
		res.Cancel()
		s.fail(r, errBusy)
		return
	}
	if !s.track() { // closing: no wait now
		s.delayed.Add(-1)
		res.Cancel()
		send(r)
		return
	}
	go func() {
		defer s.wg.Done()
		defer s.delayed.Add(-1)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.ctx.Done():
		}
		t.Stop()
		send(r)
	}()
}

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
		s.answer(r, session, req, 0, false)
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
		s.answer(r, session, req, 0, false)
		return
	}
	d := detach(r, s.nc)
	req = s.bound(d, req)
	ok := s.loads.offer(job{r: d, session: session, req: req})
	s.mu.Unlock()
	if !ok {
		if req.claim() {
			s.fail(r, errBusy)
		}
		req.release()
	}
}
