package bus_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// An ingest acknowledges nothing: a consumer that takes acks would have
// its records delivered again after its ack wait, so StartIngest refuses
// one, naming its ack policy.
func TestStartIngest_RefusesAConsumerWithAcks(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	cfg, err := streams.Ingest()
	require.NoError(t, err)
	cfg.Durable, cfg.Name = "acks", "acks"
	cfg.PriorityGroups, cfg.PriorityPolicy, cfg.PinnedTTL = nil, jetstream.PriorityPolicyNone, 0
	cfg.AckPolicy, cfg.MaxAckPending = jetstream.AckAllPolicy, 1000
	cons, err := st.CreateConsumer(ctx, cfg)
	require.NoError(t, err)
	_, err = bus.StartIngest(cons, 0, nil, func(bus.Msg) {}, nil)
	require.ErrorContains(t, err, "consumer acks takes acks (ack policy AckAll)")
}
