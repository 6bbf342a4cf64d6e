// Package store holds the live projection of every session: the ingest
// applies records to it in stream order, and readers render a session's
// context once it has caught up with the sequence they need.
//
// A Store is safe for concurrent use. Each session has its own lock, so
// applying to one session never waits on a render of another; a reader
// waiting for a sequence holds no lock at all.
package store

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// ErrWaitExpired is returned by Wait when the store did not reach the
// sequence in time.
var ErrWaitExpired = errors.New("projection did not reach the requested sequence in time")

// DefaultRejectLog is how many rejected records a Store remembers.
const DefaultRejectLog = 1000

// Store is the set of live session projections.
type Store struct {
	// Options configure every session's projection.
	Options projection.Options
	// Decoder decodes records; its limits apply to every record.
	Decoder record.Decoder
	// RejectLog is how many rejected records are kept for listing.
	RejectLog int
	// Logger receives a line per rejected record; nil discards them.
	Logger *slog.Logger

	mu       sync.RWMutex
	sessions map[string]*slot

	// applied is the watermark: every stream sequence up to it has been
	// applied or rejected.
	applied atomic.Uint64

	waitMu   sync.Mutex
	waiters  waiterHeap
	nextWake atomic.Uint64 // smallest sequence a waiter needs; MaxUint64 if none

	rejMu    sync.Mutex
	rejected []Rejection // ring
	rejNext  int
	stats    struct{ records, rejected, sessions atomic.Uint64 }
}

type slot struct {
	mu   sync.Mutex
	proj *projection.Session
}

// Rejection is a record the projection skipped: it stays in the stream.
type Rejection struct {
	Subject string    `json:"subject"`
	Session string    `json:"session,omitempty"`
	Seq     uint64    `json:"seq"`
	Size    int       `json:"size"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// Stats counts what a store has seen.
type Stats struct {
	Records  uint64 `json:"records"`  // records applied
	Rejected uint64 `json:"rejected"` // records skipped as undecodable or misaddressed
	Sessions uint64 `json:"sessions"` // sessions held
	Applied  uint64 `json:"applied"`  // stream sequence watermark
}

// New returns an empty store with the defaults.
func New() *Store {
	s := &Store{RejectLog: DefaultRejectLog, sessions: map[string]*slot{}}
	s.nextWake.Store(^uint64(0))
	return s
}

func (s *Store) slot(session string, create bool) *slot {
	s.mu.RLock()
	sl := s.sessions[session]
	s.mu.RUnlock()
	if sl != nil || !create {
		return sl
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl = s.sessions[session]; sl == nil {
		sl = &slot{proj: projection.New(s.Options)}
		s.sessions[session] = sl
		s.stats.sessions.Add(1)
	}
	return sl
}

// Apply decodes the record at stream sequence seq and applies it to its
// session. A record that does not decode is skipped and reported: the
// session's sequence still moves past it. Apply is idempotent by sequence.
func (s *Store) Apply(session string, seq uint64, data []byte) {
	v, err := s.Decoder.Decode(data)
	sl := s.slot(session, true)
	sl.mu.Lock()
	if err != nil {
		if sl.proj.Skip(seq) {
			sl.mu.Unlock()
			s.reject(Rejection{Subject: "transcripts." + session, Session: session, Seq: seq, Size: len(data), Reason: err.Error()})
		} else {
			sl.mu.Unlock()
		}
	} else {
		if sl.proj.Apply(seq, v) {
			s.stats.records.Add(1)
		}
		sl.mu.Unlock()
	}
	s.Advance(seq)
}

// Reject reports a record that belongs to no session (a subject that is
// not a valid session id) and moves the watermark past it.
func (s *Store) Reject(r Rejection) {
	s.reject(r)
	s.Advance(r.Seq)
}

func (s *Store) reject(r Rejection) {
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	s.stats.rejected.Add(1)
	if s.Logger != nil {
		s.Logger.Warn("record skipped", "subject", r.Subject, "session", r.Session, "seq", r.Seq, "size", r.Size, "reason", r.Reason)
	}
	n := s.RejectLog
	if n <= 0 {
		return
	}
	s.rejMu.Lock()
	defer s.rejMu.Unlock()
	if len(s.rejected) < n {
		s.rejected = append(s.rejected, r)
		return
	}
	s.rejected[s.rejNext%n] = r
	s.rejNext++
}

// Rejected lists the most recent rejected records, oldest first.
func (s *Store) Rejected() []Rejection {
	s.rejMu.Lock()
	defer s.rejMu.Unlock()
	out := make([]Rejection, 0, len(s.rejected))
	if len(s.rejected) == 0 {
		return out
	}
	start := s.rejNext % len(s.rejected)
	out = append(out, s.rejected[start:]...)
	return append(out, s.rejected[:start]...)
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Records:  s.stats.records.Load(),
		Rejected: s.stats.rejected.Load(),
		Sessions: s.stats.sessions.Load(),
		Applied:  s.applied.Load(),
	}
}

// Applied returns the watermark: every stream sequence up to it has been
// applied or rejected.
func (s *Store) Applied() uint64 { return s.applied.Load() }

// Advance moves the watermark to seq, when that is forward, and wakes the
// readers waiting for it. The ingest calls it for every stream sequence it
// has dealt with, in order.
func (s *Store) Advance(seq uint64) {
	for {
		cur := s.applied.Load()
		if seq <= cur {
			return
		}
		if s.applied.CompareAndSwap(cur, seq) {
			break
		}
	}
	if seq < s.nextWake.Load() {
		return
	}
	s.waitMu.Lock()
	for len(s.waiters) > 0 && s.waiters[0].seq <= seq {
		w := heap.Pop(&s.waiters).(*waiter)
		close(w.done)
	}
	s.updateNextWake()
	s.waitMu.Unlock()
}

func (s *Store) updateNextWake() {
	if len(s.waiters) == 0 {
		s.nextWake.Store(^uint64(0))
	} else {
		s.nextWake.Store(s.waiters[0].seq)
	}
}

// Wait returns once every stream sequence up to seq has been applied, or
// ErrWaitExpired after timeout, or the context's error. It returns at once
// when the store is already there.
func (s *Store) Wait(ctx context.Context, seq uint64, timeout time.Duration) error {
	if s.applied.Load() >= seq {
		return nil
	}
	if timeout <= 0 {
		return ErrWaitExpired
	}
	w := &waiter{seq: seq, done: make(chan struct{})}
	s.waitMu.Lock()
	if s.applied.Load() >= seq { // caught up since the check above
		s.waitMu.Unlock()
		return nil
	}
	heap.Push(&s.waiters, w)
	s.updateNextWake()
	s.waitMu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	s.waitMu.Lock()
	if w.index >= 0 {
		heap.Remove(&s.waiters, w.index)
		s.updateNextWake()
	}
	s.waitMu.Unlock()
	select {
	case <-w.done:
		return nil // woken while timing out: the answer is ready
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: at %d, waiting for %d", ErrWaitExpired, s.applied.Load(), seq)
}

// View calls fn with the session's projection under the session's lock,
// or with nil for a session that has no records. fn must not
// keep the projection or what it returns beyond the call, except the
// cached renderings, which are never modified once handed out.
func (s *Store) View(session string, fn func(p *projection.Session)) {
	sl := s.slot(session, false)
	if sl == nil {
		fn(nil)
		return
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	fn(sl.proj)
}

// Sessions returns the ids of the sessions held.
func (s *Store) Sessions() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	return ids
}

type waiter struct {
	seq   uint64
	done  chan struct{}
	index int
}

type waiterHeap []*waiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}
