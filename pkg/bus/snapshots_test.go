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

// A snapshot larger than the bucket's largest value is stored in parts
// and read back whole; one whose parts are of another write reads as
// none, never as a mix of the two.
func TestSnapshots_LargerThanAValue(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	snaps, err := bus.OpenSnapshots(ctx, js, 1)
	require.NoError(t, err)
	big := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7) ^ seed
		}
		return b
	}
	for _, n := range []int{1 << 20, 3<<20 + 5, 5 << 20} {
		data := big(n, byte(n))
		written, tooLarge, err := snaps.PutAll(ctx, maps.All(map[string][]byte{"big": data, "small": []byte("small")}))
		require.NoError(t, err)
		require.Equal(t, 0, tooLarge, "%d bytes", n)
		require.Equal(t, 2, written, "%d bytes", n)
		got, ok, err := snaps.Get(ctx, "big")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, data, got, "%d bytes read back whole", n)
		got, ok, err = snaps.Get(ctx, "small")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []byte("small"), got)
	}

	// Back to one value: the parts left from before are not read.
	_, _, err = snaps.PutAll(ctx, maps.All(map[string][]byte{"big": []byte("one value")}))
	require.NoError(t, err)
	got, ok, err := snaps.Get(ctx, "big")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []byte("one value"), got)

	// A head whose parts were replaced by another write's (a write in
	// progress, or one that failed half-way): none.
	_, _, err = snaps.PutAll(ctx, maps.All(map[string][]byte{"torn": big(3<<20, 1)}))
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, "CTXD_SNAPSHOTS")
	require.NoError(t, err)
	e, err := kv.Get(ctx, "torn.part2")
	require.NoError(t, err)
	part := e.Value()
	part[len(part)-1] ^= 0xff
	_, err = kv.Put(ctx, "torn.part2", part)
	require.NoError(t, err)
	_, ok, err = snaps.Get(ctx, "torn")
	require.NoError(t, err)
	require.False(t, ok, "a torn snapshot reads as none")
}
