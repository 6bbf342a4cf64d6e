//go:build !slow

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/streams"
)

// forgedRecords publishes session victim's records, interleaved with
// noise's (at 1, 3, 5 and 6 of an empty stream, noise's at 2 and 4), and
// returns victim's.
func forgedRecords(t *testing.T, c *client) []projection.Record {
	t.Helper()
	var recs []projection.Record
	for i, id := range []string{"victim", "noise", "victim", "noise", "victim", "victim"} {
		v := record.NewMap("role", "user", "content", id+" "+string(rune('a'+i)))
		seq := c.publishValue(id, v, false)
		if id == "victim" {
			recs = append(recs, projection.Record{Seq: seq, Value: v})
		}
	}
	return recs
}

// seqsOf returns the records' sequences.
func seqsOf(recs []projection.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

// forgeCheckpoint stores victim's checkpoint with an index that leaves
// its second record out, naming the stream as ctxd does, and deletes
// victim's snapshot. On an empty stream, that is
// {"from":0,"seq":6,"index":"AwEEAQ==","stream":...}.
func forgeCheckpoint(t *testing.T, nc *nats.Conn, seqs []uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	cps, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	cps.Stream = bus.StreamIdentity(st.CachedInfo())
	index := append([]uint64{seqs[0]}, seqs[2:]...)
	forged := store.Checkpoint{From: 0, Seq: seqs[len(seqs)-1]}.WithSeqs(index)
	require.NotEmpty(t, forged.Index)
	require.NoError(t, cps.Put(ctx, "victim", forged))
	if _, err := bus.OpenSnapshots(ctx, js, 0); err == nil {
		kv, err := js.KeyValue(ctx, streams.SnapshotsBucket)
		require.NoError(t, err)
		require.NoError(t, kv.Delete(ctx, "victim"))
	}
}

// victimIndex returns the sequences victim's stored checkpoint lists.
func victimIndex(t *testing.T, nc *nats.Conn) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	cps, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	cp, ok, err := cps.Get(ctx, "victim")
	require.NoError(t, err)
	require.True(t, ok)
	seqs, err := cp.Seqs()
	require.NoError(t, err)
	return seqs
}

// A checkpoint put back with an index that leaves a record of the
// session out, while ctxd is stopped (its snapshot deleted), is found
// out at the first load after the restart: the reply holds every
// record, the checkpoint is rewritten, and the snapshot a clean stop
// then writes holds every record too, so the next restart answers right
// from it.
func TestForgedIndex_OwnerRestart(t *testing.T) {
	dir := t.TempDir()
	a := startAppWith(t, dir, func(*app.Config) {})
	c := newClient(t, a.URL())
	recs := forgedRecords(t, c)
	require.Equal(t, []uint64{1, 3, 5, 6}, seqsOf(recs))
	want := projection.Build(recs, projection.Options{}).Messages
	requireMessages(t, want, c.fetchSeq("victim", 6, false).Messages)
	c.nc.Close()
	require.NoError(t, a.Close())

	// With the server alone: the forged checkpoint, no snapshot.
	alone := func(fn func(nc *nats.Conn)) {
		ns := natsd.New(dir)
		ns.Port = -1
		require.NoError(t, ns.Open())
		nc := natstest.Connect(t, ns.ClientURL())
		fn(nc)
		nc.Close()
		require.NoError(t, ns.Close())
	}
	alone(func(nc *nats.Conn) { forgeCheckpoint(t, nc, seqsOf(recs)) })

	// Restarted: right. Stopped cleanly (checkpoints and snapshots
	// written) and restarted: right again.
	for round := range 2 {
		a = startAppWith(t, dir, func(*app.Config) {})
		c = newClient(t, a.URL())
		r := c.fetchSeq("victim", 6, false)
		require.Equal(t, uint64(6), r.Seq)
		requireMessages(t, want, r.Messages, "restart %d", round)
		c.nc.Close()
		require.NoError(t, a.Close())
		alone(func(nc *nats.Conn) {
			require.Equal(t, []uint64{1, 3, 5, 6}, victimIndex(t, nc), "the checkpoint is rewritten")
		})
	}
}

// A reader (an instance that does not hold the ingest) given the forged
// checkpoint answers every request right.
func TestForgedIndex_Reader(t *testing.T) {
	url := natstest.Start(t)
	c := newClient(t, url)
	c.holdPin()
	recs := forgedRecords(t, c)
	forgeCheckpoint(t, c.nc, seqsOf(recs))
	want := projection.Build(recs, projection.Options{}).Messages
	last := recs[len(recs)-1].Seq

	for i := range 3 {
		rd := startApp(t, t.TempDir(), func(cfg *app.Config) {
			cfg.NATSURL = url
			cfg.Instance = "reader"
		})
		rc := newClient(t, url)
		for range 2 {
			r := rc.fetchSeq("victim", last, false)
			require.Equal(t, last, r.Seq)
			requireMessages(t, want, r.Messages, "reader %d", i)
		}
		require.Equal(t, map[string]int{"reader": 1}, rc.roles(), "the reply came from the reader path")
		rc.nc.Close()
		require.NoError(t, rd.Close())
		// The reader wrote the checkpoint that replaces the forged one,
		// at the latest as it stopped.
		require.Equal(t, seqsOf(recs), victimIndex(t, c.nc), "reader %d: the checkpoint is rewritten", i)
	}
}

// A checkpoint whose last record lies past the stream's last sequence
// (put back by hand, or of a stream made again with its name) is not
// used, and the first load replaces it: before, it looked newer than
// any checkpoint ctxd wrote, and stayed for good.
func TestForgedIndex_CheckpointPastTheStream(t *testing.T) {
	dir := t.TempDir()
	a := startAppWith(t, dir, func(*app.Config) {})
	c := newClient(t, a.URL())
	recs := forgedRecords(t, c)
	want := projection.Build(recs, projection.Options{}).Messages
	c.nc.Close()
	require.NoError(t, a.Close())

	alone := func(fn func(cps *bus.Checkpoints)) {
		ns := natsd.New(dir)
		ns.Port = -1
		require.NoError(t, ns.Open())
		nc := natstest.Connect(t, ns.ClientURL())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		js, err := bus.JetStream(nc)
		require.NoError(t, err)
		st, err := js.Stream(ctx, "TRANSCRIPTS")
		require.NoError(t, err)
		cps, err := bus.OpenCheckpoints(ctx, js, 0)
		require.NoError(t, err)
		cps.Stream = bus.StreamIdentity(st.CachedInfo())
		fn(cps)
		nc.Close()
		require.NoError(t, ns.Close())
	}
	alone(func(cps *bus.Checkpoints) {
		require.NoError(t, cps.Put(context.Background(), "victim", store.Checkpoint{From: 0, Seq: 1000}))
	})

	a = startAppWith(t, dir, func(*app.Config) {})
	c = newClient(t, a.URL())
	requireMessages(t, want, c.fetchSeq("victim", 6, false).Messages)
	c.nc.Close()
	require.NoError(t, a.Close())
	alone(func(cps *bus.Checkpoints) {
		cp, ok, err := cps.Get(context.Background(), "victim")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, uint64(6), cp.Seq, "replaced")
		seqs, err := cp.Seqs()
		require.NoError(t, err)
		require.Equal(t, []uint64{1, 3, 5, 6}, seqs)
	})
}

// On a stream partitioned after it had records, a session's records are
// on two subjects: transcripts.<session> up to the partitioning, then
// its partition's. A checkpoint whose index lists only the later ones
// leaves the earlier out: found out by the count on both subjects.
func TestForgedIndex_Partitioned(t *testing.T) {
	url := natstest.Start(t)
	c := newClient(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	scfg, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = bus.EnsureStream(ctx, c.js, scfg)
	require.NoError(t, err)
	recs := forgedRecords(t, c) // on transcripts.victim
	l, err := bus.Partition(ctx, c.js.Conn(), "TRANSCRIPTS", 4)
	require.NoError(t, err)
	require.Equal(t, recs[len(recs)-1].Seq, l.After)
	for i := range 3 {
		v := record.NewMap("role", "user", "content", fmt.Sprintf("victim after %d", i))
		seq := c.publishValue("victim", v, false)
		recs = append(recs, projection.Record{Seq: seq, Value: v})
		c.publishValue("noise", v, false)
	}
	require.Greater(t, recs[len(recs)-3].Seq, l.After)
	later := seqsOf(recs[len(recs)-3:])
	st, err := c.js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	cps, err := bus.OpenCheckpoints(ctx, c.js, 0)
	require.NoError(t, err)
	cps.Stream = bus.StreamIdentity(st.CachedInfo())
	require.NoError(t, cps.Put(ctx, "victim", store.Checkpoint{From: 0, Seq: later[len(later)-1]}.WithSeqs(later)))

	startApp(t, t.TempDir(), func(cfg *app.Config) { cfg.NATSURL = url })
	last := recs[len(recs)-1].Seq
	r := c.fetchSeq("victim", last, false)
	require.Equal(t, last, r.Seq)
	requireMessages(t, projection.Build(recs, projection.Options{}).Messages, r.Messages)
}
