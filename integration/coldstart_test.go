//go:build !slow

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
)

// After ctxd and its embedded server restart, sessions load from their
// checkpoints' record indexes, written at shutdown, and every first
// reply is Build of the session's records: with an index as written, one
// stale (records published after it), one naming another session's
// records, one from the format of before indexes, and none at all.
func TestColdStart_StoredIndexes(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	recs := map[string][]projection.Record{}
	ids := []string{"ok", "stale", "foreign", "old"}

	a := startAppWith(t, dir, func(*app.Config) {})
	c := newClient(t, a.URL())
	var last uint64
	for i := range 40 {
		for _, id := range ids {
			v := record.NewMap("role", "user", "content", fmt.Sprintf("%s %d", id, i))
			last = c.publishValue(id, v, false)
			recs[id] = append(recs[id], projection.Record{Seq: last, Value: v})
		}
	}
	c.fetchSeq("ok", last, false)
	// The ingest has applied them all (a reply may come from a read of
	// the stream): the shutdown writes each session's checkpoint.
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	c.nc.Close()
	require.NoError(t, a.Close())

	// With the server alone: check what was written, and change it.
	ns := natsd.New(dir)
	ns.Port = -1
	require.NoError(t, ns.Open())
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	cps, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	// Written as ctxd writes them, naming the stream: one that names
	// none is not trusted.
	st, err := js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	cps.Stream = bus.StreamIdentity(st.CachedInfo())
	stored := map[string]store.Checkpoint{}
	for _, id := range ids {
		cp, ok, err := cps.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, ok, "%s: written at shutdown", id)
		seqs, err := cp.Seqs()
		require.NoError(t, err)
		want := make([]uint64, len(recs[id]))
		for i, r := range recs[id] {
			want[i] = r.Seq
		}
		require.Equal(t, want, seqs, "%s: the checkpoint lists the session's records", id)
		stored[id] = cp
	}
	okSeqs, _ := stored["ok"].Seqs()
	foreign := store.Checkpoint{From: 0, Seq: okSeqs[len(okSeqs)-1]}.WithSeqs(okSeqs)
	require.NoError(t, cps.Put(ctx, "foreign", foreign))
	require.NoError(t, cps.Put(ctx, "old", stored["old"].WithoutIndex()))
	for i := range 5 {
		for _, id := range []string{"stale", "new"} {
			v := record.NewMap("role", "user", "content", fmt.Sprintf("%s after %d", id, i))
			ack, err := js.Publish(ctx, "transcripts."+id, recordJSON(t, v))
			require.NoError(t, err)
			last = ack.Sequence
			recs[id] = append(recs[id], projection.Record{Seq: last, Value: v})
		}
	}
	nc.Close()
	require.NoError(t, ns.Close())

	a = startAppWith(t, dir, func(*app.Config) {})
	c = newClient(t, a.URL())
	for _, id := range append(ids, "new") {
		r := c.fetchSeq(id, last, false)
		require.Equal(t, recs[id][len(recs[id])-1].Seq, r.Seq, id)
		requireMessages(t, projection.Build(recs[id], projection.Options{}).Messages, r.Messages)
	}
}

func recordJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := record.MarshalJSON(v)
	require.NoError(t, err)
	return data
}
