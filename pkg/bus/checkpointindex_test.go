package bus_test

import (
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/streams"
)

// cpAt returns a checkpoint from 1 to seq with every sequence between.
func cpAt(seq uint64) store.Checkpoint {
	seqs := make([]uint64, seq)
	for i := range seqs {
		seqs[i] = uint64(i + 1)
	}
	return store.Checkpoint{From: 1, Seq: seq}.WithSeqs(seqs)
}

func putOne(t *testing.T, c *bus.Checkpoints, session string, cp store.Checkpoint) {
	t.Helper()
	require.NoError(t, c.PutAll(testContext(t), maps.All(map[string]store.Checkpoint{session: cp})))
}

func getOne(t *testing.T, c *bus.Checkpoints, session string) store.Checkpoint {
	t.Helper()
	cp, ok, err := c.Get(testContext(t), session)
	require.NoError(t, err)
	require.True(t, ok)
	return cp
}

// Two writers of one bucket (two instances, or a shutdown and a
// rebuild): PutAll never replaces a checkpoint with an older one,
// whichever writer is behind and whatever revision it last saw.
func TestCheckpoints_NeverMoveBack(t *testing.T) {
	ctx := testContext(t)
	js := natstest.JetStream(t)
	a, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	b, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)

	putOne(t, a, "s", cpAt(10))
	putOne(t, b, "s", cpAt(5)) // b never read s
	require.Equal(t, cpAt(10), getOne(t, a, "s"), "an older checkpoint does not replace a newer one")
	putOne(t, b, "s", cpAt(12))
	require.Equal(t, cpAt(12), getOne(t, b, "s"))
	putOne(t, a, "s", cpAt(11)) // a last wrote 10: its revision is stale
	require.Equal(t, cpAt(12), getOne(t, b, "s"), "nor when the writer's revision is stale")
	putOne(t, a, "s", cpAt(13))
	require.Equal(t, cpAt(13), getOne(t, b, "s"), "a newer one is written after the conflict")
	putOne(t, b, "s", cpAt(13).WithoutIndex())
	require.Equal(t, cpAt(13), getOne(t, a, "s"), "the same checkpoint without its index does not drop it")

	// Racing writers, each with increasing checkpoints of the same
	// sessions: each session ends at the highest written.
	var wg sync.WaitGroup
	for w, c := range []*bus.Checkpoints{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(20 + w); seq < 60; seq += 2 {
				batch := map[string]store.Checkpoint{}
				for k := range 20 {
					batch[fmt.Sprintf("r%d", k)] = cpAt(seq)
				}
				if err := c.PutAll(ctx, maps.All(batch)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	all, err := a.All(ctx)
	require.NoError(t, err)
	for k := range 20 {
		require.Equal(t, cpAt(59), all[fmt.Sprintf("r%d", k)], "r%d", k)
	}
}

// A value that does not decode is an error wrapping ErrBadCheckpoint,
// and the next checkpoint written replaces it. A checkpoint too large for
// the bucket is stored without its index.
func TestCheckpoints_BadAndLargeValues(t *testing.T) {
	ctx := testContext(t)
	js := natstest.JetStream(t)
	c, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, streams.CheckpointsBucket)
	require.NoError(t, err)

	_, err = kv.Put(ctx, "g", []byte("not json"))
	require.NoError(t, err)
	_, _, err = c.Get(ctx, "g")
	require.ErrorIs(t, err, store.ErrBadCheckpoint)
	putOne(t, c, "g", cpAt(3))
	require.Equal(t, cpAt(3), getOne(t, c, "g"))

	seqs := make([]uint64, store.MaxCheckpointSeqs)
	for i := range seqs {
		seqs[i] = uint64(i+1) << 50 // 8 bytes each: more than the bucket takes
	}
	big := store.Checkpoint{From: seqs[0], Seq: seqs[len(seqs)-1]}.WithSeqs(seqs)
	require.NotEmpty(t, big.Index)
	putOne(t, c, "big", big)
	require.Equal(t, big.WithoutIndex(), getOne(t, c, "big"), "stored without its index")
}

// A bucket created with the definition of before indexes (1 KiB values)
// is raised to the definition's max_msg_size.
func TestOpenCheckpoints_RaisesMaxMsgSize(t *testing.T) {
	ctx := testContext(t)
	js := natstest.JetStream(t)
	cfg, err := streams.Checkpoints()
	require.NoError(t, err)
	want := cfg.MaxMsgSize
	cfg.MaxMsgSize = 1024
	_, err = js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	c, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	st, err := js.Stream(ctx, cfg.Name)
	require.NoError(t, err)
	require.Equal(t, want, st.CachedInfo().Config.MaxMsgSize)
	putOne(t, c, "s", cpAt(300))
	require.Equal(t, cpAt(300), getOne(t, c, "s"))
}

// ReadSubjectSeqs hands on the subject's records at the sequences asked
// for, and fails with ErrIndexStale, before handing it on, at a sequence
// holding another subject's record or none.
func TestReadSubjectSeqs(t *testing.T) {
	ctx := testContext(t)
	js := natstest.JetStream(t)
	st := ensureTranscripts(t, js)
	nc := js.Conn()
	var mine, other []uint64
	for i := range 600 { // more than one window
		subj := "transcripts.a"
		if i%3 == 2 {
			subj = "transcripts.b"
		}
		ack, err := js.Publish(ctx, subj, fmt.Appendf(nil, "%d", i))
		require.NoError(t, err)
		if subj == "transcripts.a" {
			mine = append(mine, ack.Sequence)
		} else {
			other = append(other, ack.Sequence)
		}
	}
	read := func(seqs []uint64) ([]uint64, error) {
		var got []uint64
		err := bus.ReadSubjectSeqs(ctx, nc, "TRANSCRIPTS", "transcripts.a", seqs, func(seq uint64, data []byte) error {
			require.Equal(t, fmt.Sprint(seq-1), string(data))
			got = append(got, seq)
			return nil
		})
		return got, err
	}
	got, err := read(mine)
	require.NoError(t, err)
	require.Equal(t, mine, got)

	bad := append([]uint64{}, mine[:300]...)
	bad[290] = other[150]
	got, err = read(bad)
	require.ErrorIs(t, err, store.ErrIndexStale)
	require.NotContains(t, got, other[150])

	_, err = read([]uint64{mine[0], 10_000})
	require.ErrorIs(t, err, store.ErrIndexStale, "a sequence past the stream")

	require.NoError(t, st.DeleteMsg(ctx, mine[5]))
	_, err = read(mine[:10])
	require.ErrorIs(t, err, store.ErrIndexStale, "a deleted record")
}
