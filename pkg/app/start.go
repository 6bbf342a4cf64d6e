package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
)

// ErrNoJetStream is returned by Open when the server has no JetStream
// for ctxd's account.
var ErrNoJetStream = errors.New("JetStream is not enabled")

// Start retries: a cluster still electing its JetStream leader answers
// "temporarily unavailable" or not at all for a while.
const (
	startRetryFirst = 250 * time.Millisecond
	startRetryMax   = 5 * time.Second
	// noResponderTries bounds the tries while no server answers the
	// JetStream API at all: that is a server without JetStream, unless it
	// has only just started.
	noResponderTries = 4
	// noPeerTries bounds the tries while the cluster has too few peers
	// online for the stream's replicas (a node still starting, or a
	// cluster smaller than --replicas): about 45 seconds.
	noPeerTries = 12
)

// retryStart runs fn until it succeeds, fails for good, or ctx is done:
// errors a cluster that is still electing returns are retried with
// backoff, and logged.
func (a *App) retryStart(ctx context.Context, url, what string, fn func(ctx context.Context) error) error {
	wait := startRetryFirst
	noResponders, noPeers := 0, 0
	for {
		// One try at most 5 seconds; ctx bounds them all.
		try, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(try)
		cancel()
		if err == nil {
			return nil
		}
		switch {
		case ctx.Err() != nil:
			return err
		case bus.NotEnabled(err):
			return noJetStream(url, err)
		case errors.Is(err, nats.ErrNoResponders):
			if noResponders++; noResponders >= noResponderTries {
				return noJetStream(url, err)
			}
		case bus.NoPeers(err):
			if noPeers++; noPeers >= noPeerTries {
				return fmt.Errorf("%w (is every node of the cluster up, and are there at least --replicas of them?)", err)
			}
		case !bus.Transient(err):
			return err
		}
		a.Logger.Warn("JetStream not available yet; retrying", "what", what, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, startRetryMax)
	}
}

func noJetStream(url string, err error) error {
	return fmt.Errorf("%w on %s (for ctxd's account): start nats-server with -js, or add jetstream {} to its configuration (and to the account's): %w", ErrNoJetStream, Redact(url), RedactError(url, err))
}
