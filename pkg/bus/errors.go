package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errCodeNoPeers is JetStream's "no suitable peers for placement".
const errCodeNoPeers = 10005

// NoPeers reports whether err says the cluster has too few peers online
// for the stream's replicas: a node still starting, or a cluster smaller
// than the replicas asked for.
func NoPeers(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers
}

// NotEnabled reports whether err says the server has no JetStream for
// the connection's account.
func NotEnabled(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)
}

// Transient reports whether err is one a cluster returns while it elects
// a leader, or while a server is starting.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 503 {
		return true // "JetStream system temporarily unavailable"
	}
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// A JetStream API request that a cluster without a leader leaves
// unanswered is tried again, each try bounded, for at most apiPatience:
// elections after a node fault take seconds, a cluster that stays down
// is an error.
const (
	apiTryTimeout = 5 * time.Second
	apiRetryFirst = 250 * time.Millisecond
	apiRetryMax   = 2 * time.Second
)

var apiPatience = time.Minute

// retryAPI runs fn, each try bounded by apiTryTimeout, until it
// succeeds, fails with an error that is not Transient, ctx is done, or
// the tries have failed for apiPatience.
func retryAPI(ctx context.Context, fn func(ctx context.Context) error) error {
	start := time.Now()
	wait := apiRetryFirst
	for {
		try, cancel := context.WithTimeout(ctx, apiTryTimeout)
		err := fn(try)
		cancel()
		if err == nil || ctx.Err() != nil || !Transient(err) {
			return err
		}
		if time.Since(start) >= apiPatience {
			return fmt.Errorf("JetStream did not answer for %s: %w", time.Since(start).Round(time.Second), err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, apiRetryMax)
	}
}
