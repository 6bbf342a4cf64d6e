package app

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// The gap filler of a partition reads the stream only when a delivery
// may have skipped one of the partition's records.
func TestGapTrack(t *testing.T) {
	var g gapTrack
	// The first delivery of a run: unknown before it.
	g.see(1, 10, "a")
	require.False(t, g.nothingBetween(5, 9))
	// Read once (the filler's read clears the hole): then each delivery
	// right after the previous one, under the same pin, skipped nothing.
	g.hole = false
	g.see(2, 20, "a")
	require.True(t, g.nothingBetween(11, 19))
	require.False(t, g.nothingBetween(11, 18), "not up to the current message")
	require.False(t, g.nothingBetween(10, 19), "the previous message not handled")
	// A delivery missed (3 lost): read, and until a read, every range.
	g.see(4, 40, "a")
	require.False(t, g.nothingBetween(21, 39))
	g.see(5, 50, "a") // contiguous, but the hole is not read yet
	require.False(t, g.nothingBetween(41, 49))
	g.hole = false
	g.see(6, 60, "a")
	require.True(t, g.nothingBetween(51, 59))
	// Another pin: unknown.
	g.see(7, 70, "b")
	require.False(t, g.nothingBetween(61, 69))
	// A redelivery in between (an old stream sequence) does not vouch
	// for the records before it: the range starts past it only if the
	// filler handled past it.
	g.hole = false
	g.see(8, 15, "b")
	g.see(9, 80, "b")
	require.True(t, g.nothingBetween(71, 79))
	require.False(t, g.nothingBetween(12, 79), "from before the previous message")
}

// The inspector lists a session once and reads all its records on a
// stream partitioned after it had records.
func TestInspectSource_Partitioned(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := t.Context()
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, def)
	require.NoError(t, err)
	var seqs []uint64
	publish := func() {
		ack, err := js.Publish(ctx, "transcripts.s1", []byte(`{"role":"user","content":"x"}`))
		require.NoError(t, err)
		seqs = append(seqs, ack.Sequence)
	}
	publish()
	publish()
	_, err = bus.Partition(ctx, js, def.Name, 16)
	require.NoError(t, err)
	publish()
	src := &inspectSource{StreamReader: StreamReader{NC: nc, Stream: def.Name}}
	refs, err := src.Sessions(ctx)
	require.NoError(t, err)
	require.Len(t, refs, 1)
	require.Equal(t, "s1", refs[0].ID)
	require.Equal(t, uint64(3), refs[0].Records)
	require.Equal(t, seqs[2], refs[0].LastSeq)
	var got []uint64
	require.NoError(t, src.Records(ctx, "s1", seqs[2], func(seq uint64, _ []byte) error {
		got = append(got, seq)
		return nil
	}))
	require.Equal(t, seqs, got)
}

// The partitions an instance holds share its cache bound: each
// partition's ingest store gets 1/ceil(P/N) of --cache-bytes and
// --cache-sessions, N as last counted (as if alone, P, before a count).
func TestPartitions_ShareTheCache(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CacheBytes, cfg.CacheSessions = 1600, 160
	a := New(cfg)
	r := &roles{a: a}
	a.roles = r
	r.reader = a.newStore()
	for k := range 16 {
		r.parts = append(r.parts, &part{r: r, k: k})
	}
	r.part = r.parts[0]
	r.bal = newBalancer(a, r, 0)
	t.Cleanup(func() {
		for _, p := range r.parts {
			if st := p.feeding(); st != nil {
				st.Close()
			}
		}
		r.reader.Close()
	})

	r.parts[3].gained("pin-3", 1, false)
	st := r.parts[3].feeding()
	require.Equal(t, int64(100), st.MaxBytes, "before a count: as if this instance held all 16")
	require.Equal(t, 10, st.MaxSessions)

	r.bal.target.Store(4) // 4 instances: at most 4 partitions each
	r.parts[5].gained("pin-5", 1, false)
	st = r.parts[5].feeding()
	require.Equal(t, int64(400), st.MaxBytes)
	require.Equal(t, 40, st.MaxSessions)
	require.Equal(t, int64(1600), r.reader.MaxBytes, "the reader's store keeps the whole bound")
}

// fakeMsg is a delivered message that counts how often its metadata is
// parsed.
type fakeMsg struct {
	jetstream.Msg
	meta   jetstream.MsgMetadata
	parsed *int
}

func (m fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	*m.parsed++
	meta := m.meta
	return &meta, nil
}

func (m fakeMsg) Headers() nats.Header { return nats.Header{"Nats-Pin-Id": []string{"a"}} }

// fakeDelivery is a consumer that delivers msgs when asked to consume.
type fakeDelivery struct {
	jetstream.Consumer
	msgs []jetstream.Msg
}

func (c fakeDelivery) Consume(h jetstream.MessageHandler, _ ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	for _, m := range c.msgs {
		h(m)
	}
	return nil, nil
}

// A partition's delivered message has its metadata parsed once: the gap
// tracker reads it, and hands it on parsed for the ingest.
func TestGapTrack_ParsesMetadataOnce(t *testing.T) {
	parsed := 0
	var msgs []jetstream.Msg
	for i := range uint64(3) {
		msgs = append(msgs, fakeMsg{meta: jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Consumer: i + 1, Stream: 10 * (i + 1)}}, parsed: &parsed})
	}
	g := &gapTrack{Consumer: fakeDelivery{msgs: msgs}}
	var seen []uint64
	_, err := g.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		require.NoError(t, err)
		seen = append(seen, meta.Sequence.Stream)
	})
	require.NoError(t, err)
	require.Equal(t, []uint64{10, 20, 30}, seen)
	require.Equal(t, 3, parsed, "once a message")
	// And tracked, as before.
	g.hole = false
	require.True(t, g.nothingBetween(21, 29))
}
