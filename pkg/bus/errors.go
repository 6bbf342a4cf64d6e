package bus

import (
	"context"
	"errors"

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
