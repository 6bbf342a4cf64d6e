package store

import (
	"context"
	"iter"
	"testing"
)

// funcLoader is a Loader made of funcs over the in-memory stream of a
// fakeLoader: a nil func does what the fakeLoader does.
type funcLoader struct {
	*fakeLoader
	checkpoint func(ctx context.Context, session string) (Checkpoint, bool, error)
	save       func(ctx context.Context, session string, cp Checkpoint) error
	records    func(ctx context.Context, session string, from, to uint64, fn func(seq uint64, data []byte) error) error
}

func (l *funcLoader) Checkpoint(ctx context.Context, session string) (Checkpoint, bool, error) {
	if l.checkpoint != nil {
		return l.checkpoint(ctx, session)
	}
	return l.fakeLoader.Checkpoint(ctx, session)
}

func (l *funcLoader) SaveCheckpoint(ctx context.Context, session string, cp Checkpoint) error {
	if l.save != nil {
		return l.save(ctx, session, cp)
	}
	return l.fakeLoader.SaveCheckpoint(ctx, session, cp)
}

func (l *funcLoader) Records(ctx context.Context, session string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	if l.records != nil {
		return l.records(ctx, session, from, to, fn)
	}
	return l.fakeLoader.Records(ctx, session, from, to, fn)
}

// batchLoader is a funcLoader that also saves checkpoints in batches.
type batchLoader struct {
	*funcLoader
	saveAll func(ctx context.Context, cps iter.Seq2[string, Checkpoint]) error
}

func (l *batchLoader) SaveCheckpoints(ctx context.Context, cps iter.Seq2[string, Checkpoint]) error {
	return l.saveAll(ctx, cps)
}

// blockUntil returns when release is closed, or with the context's error.
func blockUntil(ctx context.Context, release <-chan struct{}) error {
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isClosed reports whether ch is closed, for require.Eventually.
func isClosed(ch <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// newStore is New for a test: the store is closed when the test ends, so
// no writer of its outlives it.
func newStore(tb testing.TB) *Store {
	s := New()
	tb.Cleanup(func() { _ = s.Close() })
	return s
}
