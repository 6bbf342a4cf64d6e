package app

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A read of a checkpoint or a snapshot that gets no answer is tried
// again, each try but the last bounded by readTry; one that fails
// otherwise, or answers, is not.
func TestRetryRead(t *testing.T) {
	ctx := context.Background()
	t.Run("answered at the last try", func(t *testing.T) {
		tries := 0
		v, ok, err := retryRead(ctx, func(ctx context.Context) (string, bool, error) {
			tries++
			if tries < readTries {
				_, bounded := ctx.Deadline()
				require.True(t, bounded, "try %d bounded", tries)
				<-ctx.Done() // a replica that never answers
				return "", false, ctx.Err()
			}
			return "cp", true, nil
		})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "cp", v)
		require.Equal(t, readTries, tries)
	})
	t.Run("timed out by the server", func(t *testing.T) {
		tries := 0
		_, _, err := retryRead(ctx, func(ctx context.Context) ([]byte, bool, error) {
			tries++
			return nil, false, nats.ErrTimeout
		})
		require.ErrorIs(t, err, nats.ErrTimeout)
		require.Equal(t, readTries, tries)
	})
	t.Run("another error", func(t *testing.T) {
		tries := 0
		bad := errors.New("bad")
		_, _, err := retryRead(ctx, func(ctx context.Context) ([]byte, bool, error) {
			tries++
			return nil, false, bad
		})
		require.ErrorIs(t, err, bad)
		require.Equal(t, 1, tries)
	})
	t.Run("the caller's end", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		tries := 0
		_, _, err := retryRead(ctx, func(ctx context.Context) ([]byte, bool, error) {
			tries++
			return nil, false, ctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 1, tries)
	})
}
