package bus_test

import (
	"fmt"
	"maps"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
)

// TestCheckpoints_PutAll: more checkpoints than one window are all
// stored, a later value replaces an earlier one, each reads back with Get
// as Put stores it, and a key the bucket refuses is an error naming it.
func TestCheckpoints_PutAll(t *testing.T) {
	ctx := testContext(t)
	js := natstest.JetStream(t)
	cps, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)

	want := map[string]store.Checkpoint{}
	for i := range 1300 {
		want[fmt.Sprintf("s-%d", i)] = store.Checkpoint{From: uint64(i), Seq: uint64(3 * i)}
	}
	require.NoError(t, cps.Put(ctx, "s-7", store.Checkpoint{From: 1, Seq: 1}))
	require.NoError(t, cps.PutAll(ctx, maps.All(want)))
	got, err := cps.All(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)
	one, ok, err := cps.Get(ctx, "s-7")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, want["s-7"], one)

	for _, bad := range []string{"no spaces", "a..b", ".a", "a.", "", "a*"} {
		err = cps.PutAll(ctx, maps.All(map[string]store.Checkpoint{bad: {}}))
		require.ErrorIs(t, err, jetstream.ErrInvalidKey, "%q", bad)
		require.ErrorIs(t, cps.Put(ctx, bad, store.Checkpoint{}), jetstream.ErrInvalidKey, "Put refuses %q as well", bad)
	}
	err = cps.PutAll(ctx, maps.All(map[string]store.Checkpoint{"no spaces": {}}))
	require.ErrorContains(t, err, "no spaces")
}

// TestCheckpoints_PutAllUnknownKeys: a writer that has read none of the
// keys writes them without reading each first; where another writer
// stored a checkpoint, an older one is replaced and a newer one kept.
func TestCheckpoints_PutAllUnknownKeys(t *testing.T) {
	ctx := testContext(t)
	js := natstest.JetStream(t)
	other, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	stored := map[string]store.Checkpoint{}
	for i := range 600 {
		stored[fmt.Sprintf("s-%d", i)] = store.Checkpoint{From: 5, Seq: uint64(1000 + i%2)} // odd: newer than ours
	}
	require.NoError(t, other.PutAll(ctx, maps.All(stored)))

	cps, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	ours := map[string]store.Checkpoint{}
	want := map[string]store.Checkpoint{}
	for i := range 2000 {
		id := fmt.Sprintf("s-%d", i)
		ours[id] = store.Checkpoint{From: 7, Seq: 1000}
		want[id] = ours[id]
		if cp, ok := stored[id]; ok && cp.Newer(ours[id]) {
			want[id] = cp
		}
	}
	require.NoError(t, cps.PutAll(ctx, maps.All(ours)))
	got, err := cps.All(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// What it wrote it knows: writing the same again reads nothing and
	// stores nothing.
	require.NoError(t, cps.PutAll(ctx, maps.All(ours)))
	got, err = cps.All(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)
}
