package bus_test

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/streams"
)

// TestCheckpoints_BucketDeleted: an operator deletes the checkpoint
// bucket under a running ctxd (nats kv del CTXD_CHECKPOINTS, or nats
// stream rm of its stream). A checkpoint is a hint: the bucket comes back
// empty, reads find no checkpoint (sessions load from their subjects),
// and writes store again, through each of Get, Put and PutAll.
func TestCheckpoints_BucketDeleted(t *testing.T) {
	ctx := testContext(t)
	js := natstest.JetStream(t)
	cps, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	require.NoError(t, cps.Put(ctx, "s1", store.Checkpoint{From: 1, Seq: 5}))
	require.NoError(t, cps.PutAll(ctx, maps.All(map[string]store.Checkpoint{"s2": {From: 2, Seq: 6}})))

	drop := func() {
		t.Helper()
		require.NoError(t, js.DeleteKeyValue(ctx, streams.CheckpointsBucket))
		// The server answers before the stream's store is gone.
		require.Eventually(t, func() bool {
			_, err := js.Stream(ctx, "KV_"+streams.CheckpointsBucket)
			return errors.Is(err, jetstream.ErrStreamNotFound)
		}, 10*time.Second, 5*time.Millisecond)
	}

	drop()
	_, ok, err := cps.Get(ctx, "s1")
	require.NoError(t, err, "a deleted bucket holds no checkpoint")
	require.False(t, ok)
	require.NoError(t, cps.Put(ctx, "s1", store.Checkpoint{From: 1, Seq: 7}))
	got, ok, err := cps.Get(ctx, "s1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(7), got.Seq)

	drop()
	require.NoError(t, cps.PutAll(ctx, maps.All(map[string]store.Checkpoint{"s2": {From: 2, Seq: 8}, "s3": {From: 3, Seq: 9}})))
	all, err := cps.All(ctx)
	require.NoError(t, err)
	// (A store the server has not finished removing may come back with
	// the bucket: its checkpoints are hints like any other.)
	require.Equal(t, store.Checkpoint{From: 2, Seq: 8}, all["s2"])
	require.Equal(t, store.Checkpoint{From: 3, Seq: 9}, all["s3"])
}

// TestCheckpoints_OfAnotherStream: checkpoints name the stream they are
// of; read against another (the stream deleted and created again, which
// numbers other records with the same sequences), they are not there,
// and a write replaces them. Checkpoints that name no stream (written
// before they did, or by hand) are not trusted either: not there, and
// replaced by any write.
func TestCheckpoints_OfAnotherStream(t *testing.T) {
	ctx := testContext(t)
	js := natstest.JetStream(t)
	old, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	old.Stream = "TRANSCRIPTS@1"
	require.NoError(t, old.Put(ctx, "s1", store.Checkpoint{From: 40, Seq: 90}))
	untagged, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	require.NoError(t, untagged.Put(ctx, "s2", store.Checkpoint{From: 1, Seq: 2}))

	cps, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	cps.Stream = "TRANSCRIPTS@2"
	_, ok, err := cps.Get(ctx, "s1")
	require.NoError(t, err)
	require.False(t, ok, "a checkpoint of another stream")
	_, ok, err = cps.Get(ctx, "s2")
	require.NoError(t, err)
	require.False(t, ok, "a checkpoint that names no stream")
	all, err := cps.All(ctx)
	require.NoError(t, err)
	require.Empty(t, all)
	got, ok, err := untagged.Get(ctx, "s2")
	require.NoError(t, err)
	require.True(t, ok, "read as it is where no stream is named")
	require.Equal(t, store.Checkpoint{From: 1, Seq: 2}, got)

	// Older checkpoints of this stream replace the other stream's, and
	// the one that names none.
	require.NoError(t, cps.PutAll(ctx, maps.All(map[string]store.Checkpoint{"s1": {From: 3, Seq: 5}, "s2": {From: 0, Seq: 1}})))
	got, ok, err = cps.Get(ctx, "s1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.Checkpoint{From: 3, Seq: 5}, got)
	got, ok, err = cps.Get(ctx, "s2")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.Checkpoint{From: 0, Seq: 1}, got)
	_, ok, err = old.Get(ctx, "s1")
	require.NoError(t, err)
	require.False(t, ok, "and is not the old stream's")
}
