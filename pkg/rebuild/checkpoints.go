package rebuild

import (
	"context"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/record"
)

// Checkpoints gathers sessions' checkpoints from their records without
// building projections: a checkpoint needs only the sequence of the
// session's latest valid compaction and of its last record, and a running
// ctxd builds the projection from those when the session is first asked
// for. It is what a full rebuild would write (see Session), at the cost of
// decoding only the records that could be compactions.
type Checkpoints struct {
	// Decoder decodes the records that could be compactions; its limits
	// must be those the full rebuild uses, since a record it cannot decode
	// is no compaction.
	Decoder record.Decoder
	// Sessions holds each session's checkpoint.
	Sessions map[string]*bus.Checkpoint
}

// NewCheckpoints returns an empty set of checkpoints.
func NewCheckpoints() *Checkpoints {
	return &Checkpoints{Sessions: map[string]*bus.Checkpoint{}}
}

// Session returns a session's checkpoint, creating it (nothing read yet)
// when the session has none.
func (c *Checkpoints) Session(id string) *bus.Checkpoint {
	cp := c.Sessions[id]
	if cp == nil {
		cp = &bus.Checkpoint{}
		c.Sessions[id] = cp
	}
	return cp
}

// Add takes the session's record at stream sequence seq.
func (c *Checkpoints) Add(session string, seq uint64, data []byte) {
	cp := c.Session(session)
	if IsCompaction(c.Decoder, data) {
		cp.From = seq
	}
	// A projection's sequence only moves forward (Session.Apply and Skip).
	cp.Seq = max(cp.Seq, seq)
}

// Write stores every session's checkpoint in the bucket, in no particular
// order, pipelined (bus.Checkpoints.PutAll). It stops at the first error
// and returns it.
func Write(ctx context.Context, bucket *bus.Checkpoints, sessions map[string]*bus.Checkpoint) error {
	return bucket.PutAll(ctx, func(yield func(string, bus.Checkpoint) bool) {
		for id, cp := range sessions {
			if !yield(id, *cp) {
				return
			}
		}
	})
}
