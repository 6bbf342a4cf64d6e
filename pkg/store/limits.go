package store

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// Limits bound what one record and one session may hold. They decide
// which records a session holds and which compaction it restarts from,
// so the service and ctxd rebuild must apply the same Limits: with any
// other, a rebuild would write checkpoints from compactions the service
// skipped.
type Limits struct {
	// MaxRecordBytes is the largest record decoded; a larger one is
	// skipped as undecodable. 0 means record.DefaultMaxBytes.
	MaxRecordBytes int
	// MaxSessionBytes bounds a session's records since its latest
	// compaction; a record past it is quarantined. 0 or less: no bound.
	MaxSessionBytes int64
}

// Decoder returns a decoder with the record limit.
func (l Limits) Decoder() record.Decoder { return record.Decoder{MaxBytes: l.MaxRecordBytes} }

// Resets reports whether a decoded record of n bytes is a compaction its
// session restarts from: a valid one (CONTEXT.md section 4) that the
// session bound lets in. A compaction starts the session's weight afresh,
// so its own size decides; one too big for a session is never applied,
// resets nothing, and must not become the point a load starts from (the
// records before it still count).
func (l Limits) Resets(v any, n int) bool {
	return projection.IsValidCompaction(v) && (l.MaxSessionBytes <= 0 || int64(n) <= l.MaxSessionBytes)
}

// Weigh returns a session's weight, the bytes of its records since its
// latest compaction, after a record of n bytes (resets is Resets of that
// record), or an error wrapping ErrQuarantined when the record would take
// the session past MaxSessionBytes; the weight is then unchanged. A
// session weighs the same records the same way whether it was loaded early
// or late, so the same records are refused whatever was cached.
func (l Limits) Weigh(weight int64, n int, resets bool) (int64, error) {
	w := weight
	if resets {
		w = 0
	}
	if l.MaxSessionBytes > 0 && w+int64(n) > l.MaxSessionBytes {
		return weight, fmt.Errorf("%w: the session's records since its latest compaction would take %d bytes, more than the %d a session may hold",
			ErrQuarantined, w+int64(n), l.MaxSessionBytes)
	}
	return w + int64(n), nil
}

// DefaultLimits are the service's limits unless configured otherwise.
func DefaultLimits() Limits {
	return Limits{MaxRecordBytes: record.DefaultMaxBytes, MaxSessionBytes: DefaultMaxSessionBytes}
}
