package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestRetryAPI(t *testing.T) {
	old := apiPatience
	apiPatience = 600 * time.Millisecond
	t.Cleanup(func() { apiPatience = old })

	t.Run("transient errors until an answer", func(t *testing.T) {
		tries := 0
		err := retryAPI(context.Background(), func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("a try without a deadline")
			}
			if tries++; tries < 3 {
				return &jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"}
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 3, tries)
	})
	t.Run("a cluster that stays down", func(t *testing.T) {
		tries := 0
		err := retryAPI(context.Background(), func(context.Context) error {
			tries++
			return nats.ErrTimeout
		})
		require.ErrorIs(t, err, nats.ErrTimeout)
		require.Contains(t, err.Error(), "JetStream did not answer for")
		require.Greater(t, tries, 1)
	})
	t.Run("an error that is not transient", func(t *testing.T) {
		tries := 0
		err := retryAPI(context.Background(), func(context.Context) error {
			tries++
			return jetstream.ErrStreamNotFound
		})
		require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
		require.Equal(t, 1, tries)
	})
	t.Run("the caller's context ends the tries", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		tries := 0
		err := retryAPI(ctx, func(context.Context) error {
			if tries++; tries == 2 {
				cancel()
			}
			return context.DeadlineExceeded
		})
		require.True(t, errors.Is(err, context.DeadlineExceeded))
		require.Equal(t, 2, tries)
	})
}
