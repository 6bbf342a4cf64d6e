//go:build !slow

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/streams"
)

// TestOperator_CheckpointBucketDeleted: an operator deletes the
// checkpoint bucket under a running ctxd (nats kv del CTXD_CHECKPOINTS).
// Sessions not in memory load from their subjects and answer as before,
// not 500 until a restart, and the bucket is created again
// (TestCheckpoints_BucketDeleted: writes go into it).
func TestOperator_CheckpointBucketDeleted(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := []string{"b1", "b2", "b3"}
	publish := func(c *client, round int) (last uint64) {
		for _, id := range ids {
			last = c.publish(id, []byte(fmt.Sprintf(`{"role":"user","content":"%s %d"}`, id, round)))
		}
		return last
	}
	a := startApp(t, dir)
	c := newClient(t, a.URL())
	var last uint64
	for i := range 5 {
		last = publish(c, i)
	}
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	c.nc.Close()
	require.NoError(t, a.Close()) // writes every session's checkpoint

	// Restarted, holding one session at a time: the others load, from
	// their checkpoints, which the operator now deletes.
	a = startApp(t, dir, func(c *app.Config) { c.CacheSessions = 1 })
	c = newClient(t, a.URL())
	require.NoError(t, c.js.DeleteKeyValue(ctx, streams.CheckpointsBucket))
	for k := range 2 {
		for i, id := range ids {
			r, serr := c.fetch(id, []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":10000}`, last)), nil)
			require.Nil(t, serr, "%s, round %d", id, k)
			require.Equal(t, last-uint64(len(ids)-1-i), r.Seq, "%s, round %d", id, k)
			require.Len(t, r.Messages, 5, id)
		}
	}
	// The loads found the bucket gone and created it again.
	kv, err := c.js.KeyValue(ctx, streams.CheckpointsBucket)
	require.NoError(t, err, "the bucket is there again")
	require.Equal(t, streams.CheckpointsBucket, kv.Bucket())
	require.NoError(t, a.Store().SaveCheckpoints(ctx))
}

// TestOperator_ConsumerDeleted: an operator deletes the ingest consumer
// (nats consumer rm TRANSCRIPTS ctxd). Nothing is delivered any more, so
// ctxd stops loudly: Failed closes with why, /readyz says so, and until it
// stops every reply is still right (read from the stream).
func TestOperator_ConsumerDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	last := c.publish("cd1", []byte(`{"role":"user","content":"one"}`))
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))

	st, err := c.js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	require.NoError(t, st.DeleteConsumer(ctx, streams.IngestName))
	select {
	case <-a.Failed():
	case <-ctx.Done():
		t.Fatal("ctxd went on without its consumer")
	}
	require.ErrorContains(t, a.Err(), "was deleted")
	require.ErrorContains(t, a.Ready(ctx), "was deleted")

	last = c.publish("cd1", []byte(`{"role":"assistant","content":"two"}`))
	r := c.fetchSeq("cd1", last, false)
	require.Equal(t, last, r.Seq)
	require.Len(t, r.Messages, 2)
}

// TestOperator_TamperedCheckpoints: checkpoints an operator (or a bug)
// wrote by hand: past the stream, one record after the real compaction,
// garbage, a negative or quoted from. A checkpoint is a hint, checked
// against the stream: after a restart every session answers Build of its
// records, none empty or short, none 500.
func TestOperator_TamperedCheckpoints(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	compaction := record.NewMap("type", "compaction", "at", "2026-01-01T00:00:00Z", "baseSeq", int64(1), "plannerVersion", int64(1),
		"summaryModelRef", "m", "summary", "s", "qualityAudit", "passed",
		"messages", []any{record.NewMap("role", "user", "content", "summary")},
		"firstKeptIndex", int64(0), "tokensBefore", int64(10), "tokensAfter", int64(5))
	values := map[string]func(compactionSeq uint64) string{
		"past":    func(uint64) string { return `{"from":99999999,"seq":99999999}` },
		"plusone": func(c uint64) string { return fmt.Sprintf(`{"from":%d,"seq":%d}`, c+1, c+3) },
		"garbage": func(uint64) string { return `not json at all` },
		"minus":   func(uint64) string { return `{"from":-5}` },
		"quoted":  func(uint64) string { return `{"from":"12"}` },
	}
	a := startApp(t, dir)
	c := newClient(t, a.URL())
	recs := map[string][]projection.Record{}
	compactions := map[string]uint64{}
	add := func(id string, v any) uint64 {
		seq := c.publishValue(id, v, false)
		recs[id] = append(recs[id], projection.Record{Seq: seq, Value: v})
		return seq
	}
	var last uint64
	for id := range values {
		add(id, record.NewMap("role", "user", "content", "before"))
		compactions[id] = add(id, compaction)
		for i := range 4 {
			last = add(id, record.NewMap("role", "user", "content", fmt.Sprintf("after %d", i)))
		}
	}
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	c.nc.Close()
	require.NoError(t, a.Close())

	a = startApp(t, dir)
	c = newClient(t, a.URL())
	kv, err := c.js.KeyValue(ctx, streams.CheckpointsBucket)
	require.NoError(t, err)
	for id, v := range values {
		_, err := kv.Put(ctx, id, []byte(v(compactions[id])))
		require.NoError(t, err)
	}
	a.Close()
	a = startApp(t, dir)
	c = newClient(t, a.URL())
	for id := range values {
		r, serr := c.fetch(id, []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":10000}`, recs[id][len(recs[id])-1].Seq)), nil)
		require.Nil(t, serr, id)
		want := projection.Build(recs[id], projection.Options{})
		require.Equal(t, recs[id][len(recs[id])-1].Seq, r.Seq, id)
		require.Equal(t, mustJSON(t, want.Messages), mustJSON(t, r.Messages), id)
	}
}

// TestOperator_StreamRecreated: an operator deletes the TRANSCRIPTS stream
// and ctxd creates it anew; the checkpoint bucket still holds the old
// stream's checkpoints (as after a crash before new ones were written).
// They name compactions and sequences of another stream: after a restart
// every session answers Build of what the new stream holds.
func TestOperator_StreamRecreated(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	compaction := record.NewMap("type", "compaction", "at", "2026-01-01T00:00:00Z", "baseSeq", int64(1), "plannerVersion", int64(1),
		"summaryModelRef", "m", "summary", "s", "qualityAudit", "passed",
		"messages", []any{record.NewMap("role", "user", "content", "summary")},
		"firstKeptIndex", int64(0), "tokensBefore", int64(10), "tokensAfter", int64(5))
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i)
	}
	// The old stream: each session with a compaction, far into it.
	a := startApp(t, dir)
	c := newClient(t, a.URL())
	var last uint64
	for round := range 8 {
		for i, id := range ids {
			v := any(record.NewMap("role", "user", "content", fmt.Sprintf("old %s %d", id, round)))
			if round == 5 && i%2 == 0 {
				v = compaction
			}
			last = c.publishValue(id, v, false)
		}
	}
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	c.nc.Close()
	require.NoError(t, a.Close())
	old := func() map[string][]byte {
		a := startApp(t, dir)
		c := newClient(t, a.URL())
		kv, err := c.js.KeyValue(ctx, streams.CheckpointsBucket)
		require.NoError(t, err)
		out := map[string][]byte{}
		for _, id := range ids {
			e, err := kv.Get(ctx, id)
			require.NoError(t, err, id)
			out[id] = e.Value()
		}
		// The operator deletes the stream (nats stream rm TRANSCRIPTS).
		require.NoError(t, c.js.DeleteStream(ctx, "TRANSCRIPTS"))
		c.nc.Close()
		require.NoError(t, a.Close())
		return out
	}()

	// ctxd creates the stream anew; records come again, more of them:
	// the old checkpoints' sequences fall inside the new stream, on other
	// records.
	a = startApp(t, dir)
	c = newClient(t, a.URL())
	recs := map[string][]projection.Record{}
	for round := range 10 {
		for _, id := range ids {
			v := record.NewMap("role", "user", "content", fmt.Sprintf("new %s %d", id, round))
			seq := c.publishValue(id, v, false)
			recs[id] = append(recs[id], projection.Record{Seq: seq, Value: v})
			last = seq
		}
	}
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	c.nc.Close()
	require.NoError(t, a.Close())

	// The old checkpoints are what the bucket holds.
	a = startApp(t, dir, func(c *app.Config) { c.CacheSessions = 1 })
	c = newClient(t, a.URL())
	kv, err := c.js.KeyValue(ctx, streams.CheckpointsBucket)
	require.NoError(t, err)
	for id, v := range old {
		_, err := kv.Put(ctx, id, v)
		require.NoError(t, err)
	}
	c.nc.Close()
	require.NoError(t, a.Close())

	a = startApp(t, dir, func(c *app.Config) { c.CacheSessions = 1 })
	c = newClient(t, a.URL())
	for _, id := range ids {
		n := len(recs[id])
		r, serr := c.fetch(id, []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":10000}`, recs[id][n-1].Seq)), nil)
		require.Nil(t, serr, id)
		require.Equal(t, recs[id][n-1].Seq, r.Seq, id)
		want := projection.Build(recs[id], projection.Options{})
		require.Equal(t, string(mustJSON(t, want.Messages)), string(mustJSON(t, r.Messages)), id)
	}
}
