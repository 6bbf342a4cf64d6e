package bus_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// A new ingest consumer starts after the records already handled; an
// existing one keeps its place and takes the definition's pinned TTL;
// one that would not deliver every record is refused.
func TestOpenConsumer(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	all := publishN(t, js, 5)
	cfg, err := streams.Ingest()
	require.NoError(t, err)

	c, err := bus.OpenConsumer(ctx, st, cfg, 3)
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.NumPending, "records 4 and 5")
	m, err := c.Next(jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(streams.IngestGroup))
	require.NoError(t, err)
	meta, err := m.Metadata()
	require.NoError(t, err)
	require.Equal(t, all[3].seq, meta.Sequence.Stream)

	cfg.PinnedTTL = 5 * time.Second
	c, err = bus.OpenConsumer(ctx, st, cfg, 0)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, c.CachedInfo().Config.PinnedTTL, "the pinned TTL is updated")
	info, err = c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.NumPending, "the consumer keeps its place")

	for _, tt := range []struct {
		name   string
		mutate func(*jetstream.ConsumerConfig)
		fields []string
	}{
		{"explicit acks", func(c *jetstream.ConsumerConfig) { c.AckPolicy = jetstream.AckExplicitPolicy }, []string{"ack_policy"}},
		{"other subjects", func(c *jetstream.ConsumerConfig) { c.FilterSubject = "transcripts.a.>" }, []string{"filter_subject"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			other := cfg
			other.Durable, other.Name = "other-"+tt.fields[0], "other-"+tt.fields[0]
			want := other
			tt.mutate(&other)
			_, err := bus.EnsureConsumer(ctx, st, other)
			require.NoError(t, err)
			_, err = bus.OpenConsumer(ctx, st, want, 0)
			require.ErrorIs(t, err, bus.ErrIncompatible)
			require.Equal(t, tt.fields, fieldsOf(err))
			require.ErrorContains(t, err, "consumer "+want.Durable+": field "+tt.fields[0])
		})
	}
}

// A consumer made by an earlier ctxd, without the priority group, is
// replaced by the pinned one, which starts after its acknowledged floor:
// nothing acknowledged is delivered again, nothing else is passed over.
func TestOpenConsumer_ReplacesOneWithoutPriorityGroup(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	all := publishN(t, js, 6)
	cfg, err := streams.Ingest()
	require.NoError(t, err)
	old := cfg
	old.PriorityGroups, old.PriorityPolicy, old.PinnedTTL = nil, jetstream.PriorityPolicyNone, 0
	old.AckPolicy, old.MaxAckPending = jetstream.AckAllPolicy, 10000
	oc, err := bus.EnsureConsumer(ctx, st, old)
	require.NoError(t, err)
	// The earlier ctxd applied and acknowledged the first three.
	batch, err := oc.Fetch(3, jetstream.FetchMaxWait(10*time.Second))
	require.NoError(t, err)
	var last jetstream.Msg
	for m := range batch.Messages() {
		last = m
	}
	require.NotNil(t, last)
	require.NoError(t, last.DoubleAck(ctx))

	c, err := bus.OpenConsumer(ctx, st, cfg, uint64(len(all)))
	require.NoError(t, err)
	got := c.CachedInfo().Config
	require.Equal(t, jetstream.PriorityPolicyPinned, got.PriorityPolicy)
	require.Equal(t, []string{streams.IngestGroup}, got.PriorityGroups)
	require.Equal(t, cfg.PinnedTTL, got.PinnedTTL)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.NumPending, "records 4 to 6, after the old consumer's floor")
	m, err := c.Next(jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(streams.IngestGroup))
	require.NoError(t, err)
	meta, err := m.Metadata()
	require.NoError(t, err)
	require.Equal(t, all[3].seq, meta.Sequence.Stream)
	pin := m.Headers().Get("Nats-Pin-Id")
	require.NotEmpty(t, pin, "delivered under a pin")
	info, err = c.Info(ctx)
	require.NoError(t, err)
	require.Len(t, info.PriorityGroups, 1)
	require.Equal(t, pin, info.PriorityGroups[0].PinnedClientID, "the consumer's info names the pin the message carries")

	// Opened again, as the next instance does: kept as it is.
	c2, err := bus.OpenConsumer(ctx, st, cfg, uint64(len(all)))
	require.NoError(t, err)
	require.Equal(t, c.CachedInfo().Created, c2.CachedInfo().Created)
}

// The pinned consumer of an earlier ctxd, which acknowledged the records
// it applied (ack policy all), is replaced by one without acks that
// starts after its acknowledged floor: nothing is passed over, and what
// the old one delivered unacknowledged is delivered again.
func TestOpenConsumer_ReplacesOneThatAcks(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	all := publishN(t, js, 6)
	cfg, err := streams.Ingest()
	require.NoError(t, err)
	require.Equal(t, jetstream.AckNonePolicy, cfg.AckPolicy)
	old := cfg
	old.AckPolicy, old.AckWait, old.MaxAckPending = jetstream.AckAllPolicy, 30*time.Second, 10000
	oc, err := bus.EnsureConsumer(ctx, st, old)
	require.NoError(t, err)
	// The earlier ctxd was delivered four and acknowledged three.
	batch, err := oc.Fetch(4, jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(streams.IngestGroup))
	require.NoError(t, err)
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	require.Len(t, got, 4)
	require.NoError(t, got[2].DoubleAck(ctx))

	c, err := bus.OpenConsumer(ctx, st, cfg, uint64(len(all)))
	require.NoError(t, err)
	require.Equal(t, jetstream.AckNonePolicy, c.CachedInfo().Config.AckPolicy)
	require.Equal(t, jetstream.PriorityPolicyPinned, c.CachedInfo().Config.PriorityPolicy)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.NumPending, "records 4 to 6, after the old consumer's floor")
	m, err := c.Next(jetstream.FetchMaxWait(10*time.Second), jetstream.FetchPriorityGroup(streams.IngestGroup))
	require.NoError(t, err)
	meta, err := m.Metadata()
	require.NoError(t, err)
	require.Equal(t, all[3].seq, meta.Sequence.Stream)

	// Opened again, as the next instance does: kept as it is.
	c2, err := bus.OpenConsumer(ctx, st, cfg, uint64(len(all)))
	require.NoError(t, err)
	require.Equal(t, c.CachedInfo().Created, c2.CachedInfo().Created)
}
