package rebuild

import (
	"context"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
)

// Checkpoints gathers sessions' checkpoints from their records without
// building projections: a checkpoint needs only the sequence of the
// session's latest valid compaction and of its last record, and a running
// ctxd builds the projection from those when the session is first asked
// for. It is what a full rebuild would write (see Session), at the cost of
// decoding only the records that could be compactions.
type Checkpoints struct {
	// Limits must be the service's: they decide which compaction a
	// session restarts from (store.Limits.Resets).
	Limits store.Limits
	// Sessions holds each session's checkpoint.
	Sessions map[string]*store.Checkpoint
}

// NewCheckpoints returns an empty set of checkpoints.
func NewCheckpoints() *Checkpoints {
	return &Checkpoints{Sessions: map[string]*store.Checkpoint{}}
}

// Session returns a session's checkpoint, creating it (nothing read yet)
// when the session has none.
func (c *Checkpoints) Session(id string) *store.Checkpoint {
	cp := c.Sessions[id]
	if cp == nil {
		cp = &store.Checkpoint{}
		c.Sessions[id] = cp
	}
	return cp
}

// Add takes the session's record at stream sequence seq.
func (c *Checkpoints) Add(session string, seq uint64, data []byte) {
	cp := c.Session(session)
	if Resets(c.Limits, data) {
		cp.From = seq
	}
	// A projection's sequence only moves forward (Session.Apply and Skip).
	cp.Seq = max(cp.Seq, seq)
}

// Write stores every session's checkpoint in the bucket, in no particular
// order, pipelined (bus.Checkpoints.PutAll). It stops at the first error
// and returns it.
func Write(ctx context.Context, bucket *bus.Checkpoints, sessions map[string]*store.Checkpoint) error {
	return bucket.PutAll(ctx, func(yield func(string, store.Checkpoint) bool) {
		for id, cp := range sessions {
			if !yield(id, *cp) {
				return
			}
		}
	})
}
