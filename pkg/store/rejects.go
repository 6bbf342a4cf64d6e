package store

import (
	"sync"
	"sync/atomic"
	"time"
)

// Rejection is a record the projection skipped: it stays in the stream.
type Rejection struct {
	Subject string    `json:"subject"`
	Session string    `json:"session,omitempty"`
	Seq     uint64    `json:"seq"`
	Size    int       `json:"size"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// rejectLog counts the rejected records and keeps the latest for listing.
type rejectLog struct {
	count atomic.Uint64

	mu   sync.Mutex
	ring []Rejection
	next int // where the oldest is, once the ring is full
}

// add counts r and keeps it among the latest keep.
func (l *rejectLog) add(r Rejection, keep int) {
	l.count.Add(1)
	if keep <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) < keep {
		l.ring = append(l.ring, r)
		return
	}
	l.ring[l.next%len(l.ring)] = r
	l.next++
}

// list returns the records kept, oldest first.
func (l *rejectLog) list() []Rejection {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Rejection, 0, len(l.ring))
	if len(l.ring) == 0 {
		return out
	}
	start := l.next % len(l.ring)
	out = append(out, l.ring[start:]...)
	return append(out, l.ring[:start]...)
}

// quarantine is the set of poison records: decoded, never applied.
type quarantine struct {
	n    atomic.Int64 // len(seqs), read without the lock
	mu   sync.Mutex
	seqs map[uint64]bool
}

func (q *quarantine) add(seq uint64) {
	q.mu.Lock()
	if q.seqs == nil {
		q.seqs = map[uint64]bool{}
	}
	q.seqs[seq] = true
	q.n.Store(int64(len(q.seqs)))
	q.mu.Unlock()
}

func (q *quarantine) has(seq uint64) bool {
	if q.n.Load() == 0 {
		return false // the common case, without the lock
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.seqs[seq]
}
