package bus_test

import (
	"maps"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

// Sweep at a start empties a bucket written at another state, and says
// so only when it removed a snapshot: a bucket with none, or one already
// swept at the same state, is left as it is, and the next start finds
// nothing to sweep.
func TestSnapshots_Sweep(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	snaps, err := bus.OpenSnapshots(ctx, js, 1)
	require.NoError(t, err)
	now := bus.SnapshotState{Stream: "TRANSCRIPTS@1", Removed: 0}

	swept, err := snaps.Sweep(ctx, now)
	require.NoError(t, err)
	require.False(t, swept, "a new bucket holds no snapshot")
	swept, err = snaps.Sweep(ctx, now)
	require.NoError(t, err)
	require.False(t, swept)

	written, _, err := snaps.PutAll(ctx, maps.All(map[string][]byte{"s1": []byte("one"), "s2": []byte("two")}))
	require.NoError(t, err)
	require.Equal(t, 2, written)
	swept, err = snaps.Sweep(ctx, now)
	require.NoError(t, err)
	require.False(t, swept, "written at now: kept")
	_, ok, err := snaps.Get(ctx, "s1")
	require.NoError(t, err)
	require.True(t, ok)

	later := bus.SnapshotState{Stream: "TRANSCRIPTS@1", Removed: 3}
	swept, err = snaps.Sweep(ctx, later)
	require.NoError(t, err)
	require.True(t, swept, "written before records left the stream: removed")
	_, ok, err = snaps.Get(ctx, "s1")
	require.NoError(t, err)
	require.False(t, ok)
	swept, err = snaps.Sweep(ctx, later)
	require.NoError(t, err)
	require.False(t, swept, "swept at this state already")
}
