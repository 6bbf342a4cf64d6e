package bus_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// ackers counts the goroutines acknowledging for an ingest.
func ackers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "bus.(*Ingest).flush(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// An ingest acknowledges on a ticker only when its consumer takes acks.
// ctxd's consumers take none, and an instance runs an ingest per
// partition it pulls: each would wake it every few milliseconds for
// nothing. Records are handled either way, and with acks every one is
// acknowledged.
func TestIngest_AckTickerOnlyWithAcks(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	for _, tc := range []struct {
		name    string
		policy  jetstream.AckPolicy
		tickers int
	}{
		{"no acks", jetstream.AckNonePolicy, 0},
		{"acks", jetstream.AckAllPolicy, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := streams.Ingest()
			require.NoError(t, err)
			cfg.Durable = "ticker-" + strings.ReplaceAll(tc.name, " ", "-")
			cfg.Name = cfg.Durable
			cfg.PriorityGroups, cfg.PriorityPolicy, cfg.PinnedTTL = nil, jetstream.PriorityPolicyNone, 0
			cfg.AckPolicy = tc.policy
			if tc.policy != jetstream.AckNonePolicy {
				cfg.MaxAckPending = 1000
			}
			cons, err := bus.EnsureConsumer(ctx, st, cfg)
			require.NoError(t, err)
			before := ackers()
			var col collector
			in, err := bus.StartIngest(cons, 0, nil, col.handle, nil)
			require.NoError(t, err)
			want := publishN(t, js, 5)
			// The consumer delivers every record of the stream: the
			// earlier subtests' too.
			require.Eventually(t, func() bool {
				got := col.got()
				return len(got) > 0 && got[len(got)-1].seq == want[len(want)-1].seq
			}, 10*time.Second, 5*time.Millisecond)
			require.Equal(t, want, col.got()[len(col.got())-len(want):])
			require.Equal(t, tc.tickers, ackers()-before, "ack goroutines of the ingest")
			require.NoError(t, in.Close())
			require.Equal(t, before, ackers(), "none left after Close")
			if tc.policy != jetstream.AckNonePolicy {
				// An ack is not awaited: the server counts it soon after.
				require.Eventually(t, func() bool {
					info, err := cons.Info(ctx)
					return err == nil && info.NumAckPending == 0
				}, 10*time.Second, 5*time.Millisecond, "every record acknowledged")
			}
		})
	}
}
