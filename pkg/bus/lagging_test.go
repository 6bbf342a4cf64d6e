package bus_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

// laggingStream is a TRANSCRIPTS stream of 300 records over sessions s0,
// s1 and s2 whose direct gets are answered, two times in three, by a
// replica that holds only the first 200.
//
// The stale replicas are mirrors of the stream: a mirror of a stream with
// allow_direct answers the stream's direct gets in the queue group of its
// replicas (_sys_, which clients may not join), and one that refuses
// records past its max_msgs (discard new) stays where it is, as a
// follower that has not caught up would.
func laggingStream(t *testing.T) (*nats.Conn, []published) {
	t.Helper()
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ensureTranscripts(t, js)
	all := publishN(t, js, 200)
	ctx := testContext(t)
	for i := range 2 {
		lag, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name:         fmt.Sprintf("LAGGING%d", i),
			Mirror:       &jetstream.StreamSource{Name: "TRANSCRIPTS"},
			MirrorDirect: true,
			MaxMsgs:      200,
			Discard:      jetstream.DiscardNew,
		})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			info, err := lag.Info(ctx)
			return err == nil && info.State.LastSeq == 200
		}, 20*time.Second, 5*time.Millisecond, "the mirror holds the first 200 records")
	}
	all = append(all, publishN(t, js, 100)...)
	return nc, all
}

// A direct get answered by a replica that lacks the latest records must
// not make a read miss them: a hole there would be a context without a
// record, or a gap the ingest acknowledges unapplied. Each read is made
// many times, so that the stale replicas answer some of its requests.
func TestDirectReads_LaggingReplica(t *testing.T) {
	nc, all := laggingStream(t)
	ctx := testContext(t)
	const reads = 30
	of := func(subject string, from, to uint64) []published {
		var out []published
		for _, p := range all {
			if (subject == "" || p.subject == subject) && p.seq >= from && p.seq <= to {
				out = append(out, p)
			}
		}
		return out
	}
	seqsOf := func(ps []published) []uint64 {
		var out []uint64
		for _, p := range ps {
			out = append(out, p.seq)
		}
		return out
	}

	t.Run("ReadSubject", func(t *testing.T) {
		for _, r := range []struct{ from, to uint64 }{{1, 300}, {250, 300}, {1, 290}} {
			want := of("transcripts.s1", r.from, r.to)
			for i := range reads {
				var got []published
				require.NoError(t, bus.ReadSubject(ctx, nc, "TRANSCRIPTS", "transcripts.s1", r.from, r.to, func(seq uint64, data []byte) error {
					got = append(got, published{"transcripts.s1", seq, string(data)})
					return nil
				}))
				require.Equal(t, seqsOf(want), seqsOf(got), "read %d of [%d, %d]: every record of the session", i, r.from, r.to)
				require.Equal(t, want, got)
			}
		}
	})
	t.Run("ReadSeqs", func(t *testing.T) {
		want := of("transcripts.s2", 1, 300)
		for i := range reads {
			var got []uint64
			require.NoError(t, bus.ReadSeqs(ctx, nc, "TRANSCRIPTS", seqsOf(want), func(seq uint64, data []byte) error {
				require.Equal(t, all[seq-1].data, string(data))
				got = append(got, seq)
				return nil
			}))
			require.Equal(t, seqsOf(want), got, "read %d: every sequence asked for", i)
		}
	})
	t.Run("ReadRange", func(t *testing.T) {
		for _, r := range []struct{ from, to uint64 }{{150, 299}, {201, 250}} {
			want := of("", r.from, r.to)
			for i := range reads {
				var got []published
				require.NoError(t, bus.ReadRange(ctx, nc, "TRANSCRIPTS", r.from, r.to, func(m bus.Msg) error {
					got = append(got, asPublished(m))
					return nil
				}))
				require.Equal(t, seqsOf(want), seqsOf(got), "read %d of [%d, %d]: every record of the range", i, r.from, r.to)
				require.Equal(t, want, got)
			}
		}
	})
}
