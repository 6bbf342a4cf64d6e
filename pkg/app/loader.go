package app

import (
	"context"
	"errors"
	"iter"
	"maps"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/nats-io/nats.go"
)

// streamLoader loads sessions from the stream and the checkpoint bucket:
// where the store and the bus meet.
type streamLoader struct {
	nc     *nats.Conn
	stream string
	cps    *bus.Checkpoints
	layout bus.Layout // where a session's records are

	snaps    *bus.Snapshots
	identity string // bus.StreamIdentity of the stream
}

// readTry bounds each but the last of readTries reads of a checkpoint
// or a snapshot. A key-value get is a direct get, which any replica of
// the bucket may answer: one on a frozen node never does, and would hold
// the load until its deadline. Asked again, another replica likely
// answers.
const (
	readTry   = 300 * time.Millisecond
	readTries = 3
)

// retryRead runs a read of a bucket up to readTries times, each but the
// last within readTry, as long as it fails for want of an answer: the
// one retry of the checkpoint and snapshot reads.
func retryRead[T any](ctx context.Context, read func(ctx context.Context) (T, bool, error)) (T, bool, error) {
	for try := 1; ; try++ {
		if try == readTries {
			return read(ctx)
		}
		tctx, cancel := context.WithTimeout(ctx, readTry)
		v, ok, err := read(tctx)
		cancel()
		if err == nil || ctx.Err() != nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
			return v, ok, err
		}
	}
}

func (l *streamLoader) Checkpoint(ctx context.Context, session string) (store.Checkpoint, bool, error) {
	return retryRead(ctx, func(ctx context.Context) (store.Checkpoint, bool, error) {
		return l.cps.Get(ctx, session)
	})
}

// SaveCheckpoint writes one checkpoint as SaveCheckpoints does: never in
// place of a newer one (bus.Checkpoints.Put would write it whatever the
// bucket holds).
func (l *streamLoader) SaveCheckpoint(ctx context.Context, session string, cp store.Checkpoint) error {
	return l.SaveCheckpoints(ctx, maps.All(map[string]store.Checkpoint{session: cp}))
}

// SaveCheckpoints writes a batch of checkpoints pipelined (store.BatchSaver).
func (l *streamLoader) SaveCheckpoints(ctx context.Context, cps iter.Seq2[string, store.Checkpoint]) error {
	return l.cps.PutAll(ctx, cps)
}

func (l *streamLoader) Records(ctx context.Context, session string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	return l.layout.ReadSubject(ctx, l.nc, session, from, to, fn)
}

// readOnly is a streamLoader that writes no checkpoint, but those that
// replace one a load found wrong (store.Checkpoint.Corrective): a
// checkpoint is a hint, and a second writer could only make it older;
// a wrong one, which the owner may never load, is replaced by the first
// instance that finds it, and only that one.
type readOnly struct{ *streamLoader }

func (l readOnly) SaveCheckpoint(ctx context.Context, session string, cp store.Checkpoint) error {
	return l.SaveCheckpoints(ctx, maps.All(map[string]store.Checkpoint{session: cp}))
}

func (l readOnly) SaveCheckpoints(ctx context.Context, cps iter.Seq2[string, store.Checkpoint]) error {
	return l.cps.PutAll(ctx, func(yield func(string, store.Checkpoint) bool) {
		for id, cp := range cps {
			if cp.Corrective() && !yield(id, cp) {
				return
			}
		}
	})
}

func (l *streamLoader) RecordsAt(ctx context.Context, session string, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	return l.layout.ReadSubjectSeqs(ctx, l.nc, session, seqs, fn)
}

// CountRecords counts a session's records from from on, on every
// subject they are stored on (store.Prover).
func (l *streamLoader) CountRecords(ctx context.Context, session string, from uint64) (uint64, error) {
	return l.layout.Count(ctx, l.nc, session, from)
}

// StreamLast returns the stream's last sequence, as its leader says it
// (store.Prover).
func (l *streamLoader) StreamLast(ctx context.Context) (uint64, error) {
	_, last, err := bus.Removed(ctx, l.nc, l.stream)
	return last, err
}
