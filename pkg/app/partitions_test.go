package app

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

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
