package bus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

// Each limit of a stream deletes transcripts once it is reached (or, with
// discard new, refuses them).
var limitMutations = []struct {
	name   string
	mutate func(*jetstream.StreamConfig)
	fields []string
}{
	{"max_age", func(c *jetstream.StreamConfig) { c.MaxAge = 24 * time.Hour }, []string{"max_age"}},
	{"max_msgs", func(c *jetstream.StreamConfig) { c.MaxMsgs = 1000 }, []string{"max_msgs"}},
	{"max_bytes", func(c *jetstream.StreamConfig) { c.MaxBytes = 1 << 30 }, []string{"max_bytes"}},
	{"max_msgs_per_subject", func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 100 }, []string{"max_msgs_per_subject"}},
	{"discard", func(c *jetstream.StreamConfig) { c.Discard = jetstream.DiscardNew }, []string{"discard"}},
	{"every limit", func(c *jetstream.StreamConfig) {
		c.MaxAge = time.Hour
		c.MaxMsgs = 10
		c.MaxBytes = 1 << 20
		c.MaxMsgsPerSubject = 1
		c.Discard = jetstream.DiscardNew
	}, []string{"discard", "max_age", "max_bytes", "max_msgs", "max_msgs_per_subject"}},
}

// A stream with a limit is refused, the field named, unless limits are
// allowed; then each limit is reported as accepted.
func TestCheckStream_Limits(t *testing.T) {
	want := transcripts(t)
	for _, tt := range limitMutations {
		t.Run(tt.name, func(t *testing.T) {
			have := want
			tt.mutate(&have)
			err := bus.CheckStream(have, want)
			require.ErrorIs(t, err, bus.ErrIncompatible)
			require.ErrorIs(t, err, bus.ErrLimit)
			require.Equal(t, tt.fields, fieldsOf(err))
			for _, f := range tt.fields {
				require.ErrorContains(t, err, "stream TRANSCRIPTS: field "+f+" is ")
			}

			var accepted []string
			require.NoError(t, bus.CheckStream(have, want, bus.AllowLimits(func(fe *bus.FieldError) {
				require.ErrorIs(t, fe, bus.ErrLimit)
				accepted = append(accepted, fe.Field)
			})))
			slices.Sort(accepted)
			require.Equal(t, tt.fields, accepted)
			require.NoError(t, bus.CheckStream(have, want, bus.AllowLimits(nil)))
		})
	}

	// A limit does not hide the differences limits are not: those are
	// refused whatever is allowed.
	have := want
	have.MaxAge = time.Hour
	have.Storage = jetstream.MemoryStorage
	err := bus.CheckStream(have, want, bus.AllowLimits(nil))
	require.ErrorIs(t, err, bus.ErrIncompatible)
	require.NotErrorIs(t, err, bus.ErrLimit)
	require.Equal(t, []string{"storage"}, fieldsOf(err))

	// Unlimited, as the server stores it (-1) or as a definition may say it (0).
	have = want
	have.MaxMsgs, have.MaxBytes, have.MaxMsgsPerSubject = 0, 0, 0
	require.NoError(t, bus.CheckStream(have, want))
}

// An existing stream with limits is refused, and left as it is; with
// limits allowed it is used as it is.
func TestEnsureStream_Limits(t *testing.T) {
	js := natstest.JetStream(t)
	want := transcripts(t)
	for _, tt := range limitMutations {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			have := want
			tt.mutate(&have)
			_, err := js.CreateStream(ctx, have)
			require.NoError(t, err)
			t.Cleanup(func() { js.DeleteStream(context.Background(), want.Name) })

			st, err := bus.EnsureStream(ctx, js, want)
			require.Nil(t, st)
			require.ErrorIs(t, err, bus.ErrLimit)
			require.Equal(t, tt.fields, fieldsOf(err))

			var accepted []string
			st, err = bus.EnsureStream(ctx, js, want, bus.AllowLimits(func(fe *bus.FieldError) { accepted = append(accepted, fe.Field) }))
			require.NoError(t, err)
			slices.Sort(accepted)
			require.Equal(t, tt.fields, accepted)
			kept := st.CachedInfo().Config
			require.Equal(t, have.MaxAge, kept.MaxAge, "the stream is left as it is")
			require.Equal(t, have.Discard, kept.Discard)
		})
	}
}
