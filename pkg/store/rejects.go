package store

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/pkg/record"
)

// Rejection is a record the projection skipped: it stays in the stream.
type Rejection struct {
	Subject string `json:"subject"`
	Session string `json:"session,omitempty"`
	Seq     uint64 `json:"seq"`
	Size    int    `json:"size"`
	Reason  string `json:"reason"`
	// Kind classes the reason, for counting: one of the Kind... constants.
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`
}

// Kinds of rejection.
const (
	KindUndecodable = "undecodable" // not a JSON object or msgpack map
	KindTooLarge    = "too_large"   // larger than the decoder's limit
	KindSubject     = "subject"     // on a subject that is not a valid session
	KindQuarantined = "quarantined" // decoded, but past the session's bound or failing to apply
)

// decodeKind classes a decode error.
func decodeKind(err error) string {
	if errors.Is(err, record.ErrTooLarge) {
		return KindTooLarge
	}
	return KindUndecodable
}

// rejectLog counts the rejected records and keeps the latest for listing,
// each once: a record reported again while it is listed (a record
// quarantined past its session's bound, which every load of the session
// finds again) is neither listed nor counted again.
type rejectLog struct {
	count atomic.Uint64
	kinds sync.Map // Kind -> *atomic.Uint64

	mu     sync.Mutex
	ring   []Rejection
	next   int             // where the oldest is, once the ring is full
	listed map[uint64]bool // the sequences in ring
}

// add counts r and keeps it among the latest keep, with the time it is
// added when it has none; it reports whether r is new.
func (l *rejectLog) add(r Rejection, keep int) bool {
	if keep <= 0 {
		l.count.Add(1)
		l.countKind(r.Kind)
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.listed[r.Seq] {
		return false
	}
	l.count.Add(1)
	l.countKind(r.Kind)
	if r.At.IsZero() {
		r.At = time.Now().UTC()
	}
	if l.listed == nil {
		l.listed = map[uint64]bool{}
	}
	l.listed[r.Seq] = true
	if len(l.ring) < keep {
		l.ring = append(l.ring, r)
		return true
	}
	i := l.next % len(l.ring)
	delete(l.listed, l.ring[i].Seq)
	l.ring[i] = r
	l.next++
	return true
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

func (l *rejectLog) countKind(kind string) {
	c, ok := l.kinds.Load(kind)
	if !ok {
		c, _ = l.kinds.LoadOrStore(kind, new(atomic.Uint64))
	}
	c.(*atomic.Uint64).Add(1)
}

// byKind returns the counts by kind, nil when there are none.
func (l *rejectLog) byKind() map[string]uint64 {
	var m map[string]uint64
	l.kinds.Range(func(k, v any) bool {
		if m == nil {
			m = map[string]uint64{}
		}
		m[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return m
}
