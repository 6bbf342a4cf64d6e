package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
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
