package rebuild

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
)

type added struct {
	session string
	seq     uint64
	data    []byte
}

// fullCheckpoints is the reference: every record decoded and applied to a
// whole projection.
func fullCheckpoints(lim store.Limits, recs []added) map[string]store.Checkpoint {
	sessions := map[string]*Session{}
	for _, r := range recs {
		s := sessions[r.session]
		if s == nil {
			s = NewSession(projection.Options{}, lim)
			sessions[r.session] = s
		}
		s.Add(r.seq, r.data)
	}
	out := map[string]store.Checkpoint{}
	for id, s := range sessions {
		out[id] = s.Checkpoint()
	}
	return out
}

func fastCheckpoints(lim store.Limits, recs []added) map[string]store.Checkpoint {
	c := NewCheckpoints()
	c.Limits = lim
	for _, r := range recs {
		c.Add(r.session, r.seq, r.data)
	}
	out := map[string]store.Checkpoint{}
	for id, cp := range c.Sessions {
		out[id] = *cp
	}
	return out
}

// Records of hostile inputs, intact and mutated, spread over sessions:
// the checkpoints gathered without projections are those of the full
// rebuild.
func TestCheckpoints_SameAsFullRebuild(t *testing.T) {
	inputs := hostileRecords(t)
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 1))
		var recs []added
		seq := uint64(0)
		for range 200 {
			data := inputs[r.IntN(len(inputs))]
			if r.IntN(3) == 0 {
				data = mutate(r, data)
			}
			seq += 1 + uint64(r.IntN(3)) // other subjects' records between
			recs = append(recs, added{fmt.Sprintf("s%d", r.IntN(5)), seq, data})
		}
		for _, lim := range []store.Limits{store.DefaultLimits(), {}, {MaxRecordBytes: 200}, {MaxSessionBytes: 300}, {MaxRecordBytes: 250, MaxSessionBytes: 1000}} {
			require.Equal(t, fullCheckpoints(lim, recs), fastCheckpoints(lim, recs), "seed %d, limits %+v", seed, lim)
		}
	}
}

// Each hostile input alone is classified as decoding would.
func TestResets_Exact(t *testing.T) {
	valid := 0
	for _, data := range hostileRecords(t) {
		for _, lim := range []store.Limits{{}, {MaxRecordBytes: 300}, {MaxSessionBytes: 400}} {
			want := resetsByDecoding(lim, data)
			require.Equal(t, want, Resets(lim, data), "%q under %+v", data, lim)
		}
		if resetsByDecoding(store.Limits{}, data) {
			valid++
		}
	}
	require.Greater(t, valid, 20, "the inputs hold valid compactions, escaped ones too")
}

// A compaction the service would not restart from, because it is larger
// than a record or a session may be, resets nothing here either.
func TestResets_Limits(t *testing.T) {
	js, err := record.MarshalJSON(record.NewMap(compactionFields()...))
	require.NoError(t, err)
	n := len(js)
	require.True(t, Resets(store.Limits{}, js))
	require.True(t, Resets(store.Limits{MaxRecordBytes: n, MaxSessionBytes: int64(n)}, js))
	require.False(t, Resets(store.Limits{MaxRecordBytes: n - 1}, js), "too large to decode")
	require.False(t, Resets(store.Limits{MaxSessionBytes: int64(n - 1)}, js), "too large for a session")
}

func TestResets_SkipsOtherRecords(t *testing.T) {
	for _, data := range []string{
		`{"role":"user","content":"fix the login button"}`,
		`{"type":"message","text":"compact it"}`,
		"\x82\xa4role\xa4user\xa7content\xa3fix",
	} {
		require.False(t, mayBeCompaction([]byte(data)), "%q needs no decoding", data)
	}
	require.True(t, mayBeCompaction([]byte(`{"type":"\u0063ompaction"}`)))
	require.True(t, mayBeCompaction([]byte(`{"content":"a compaction"}`)))

	js, err := record.MarshalJSON(record.NewMap(compactionFields()...))
	require.NoError(t, err)
	for _, data := range [][]byte{js, escapeLetters(js, "compaction", true), escapeLetters(escapeLetters(js, "type", true), "compaction", false)} {
		require.True(t, Resets(store.Limits{}, data), "%s", data)
	}
}

func resetsByDecoding(lim store.Limits, data []byte) bool {
	v, err := lim.Decoder().Decode(data)
	return err == nil && lim.Resets(v, len(data))
}

func FuzzResets(f *testing.F) {
	for _, data := range hostileRecords(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := store.DefaultLimits()
		if got, want := Resets(lim, data), resetsByDecoding(lim, data); got != want {
			t.Fatalf("Resets(%q) = %v, decoding says %v", data, got, want)
		}
	})
}

func TestWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := natstest.JetStream(t)
	bucket, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)

	want := map[string]store.Checkpoint{}
	sessions := map[string]*store.Checkpoint{}
	for i := range 100 {
		cp := store.Checkpoint{From: uint64(i), Seq: uint64(2*i + 1)}
		want[fmt.Sprintf("s%d", i)] = cp
		sessions[fmt.Sprintf("s%d", i)] = &cp
	}
	require.NoError(t, Write(ctx, bucket, sessions))
	got, err := bucket.All(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)

	done, stop := context.WithCancel(ctx)
	stop()
	require.ErrorIs(t, Write(done, bucket, sessions), context.Canceled)
}
