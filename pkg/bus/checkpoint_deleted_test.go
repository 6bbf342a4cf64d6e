package bus_test

import (
	"maps"
	"testing"

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
// and writes store again, through each of Get, Put, PutAll and All.
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
	require.Equal(t, map[string]store.Checkpoint{"s2": {From: 2, Seq: 8}, "s3": {From: 3, Seq: 9}}, all)

	drop()
	all, err = cps.All(ctx)
	require.NoError(t, err)
	require.Empty(t, all)
}
