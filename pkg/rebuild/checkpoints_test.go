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
)

type added struct {
	session string
	seq     uint64
	data    []byte
}

// fullCheckpoints is the reference: every record decoded and applied to a
// whole projection.
func fullCheckpoints(dec record.Decoder, recs []added) map[string]bus.Checkpoint {
	sessions := map[string]*Session{}
	for _, r := range recs {
		s := sessions[r.session]
		if s == nil {
			s = NewSession(projection.Options{})
			sessions[r.session] = s
		}
		s.Add(dec, r.seq, r.data)
	}
	out := map[string]bus.Checkpoint{}
	for id, s := range sessions {
		out[id] = s.Checkpoint()
	}
	return out
}

func fastCheckpoints(dec record.Decoder, recs []added) map[string]bus.Checkpoint {
	c := NewCheckpoints()
	c.Decoder = dec
	for _, r := range recs {
		c.Add(r.session, r.seq, r.data)
	}
	out := map[string]bus.Checkpoint{}
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
		for _, dec := range []record.Decoder{{}, {MaxBytes: 200}, {MaxDepth: 2}} {
			require.Equal(t, fullCheckpoints(dec, recs), fastCheckpoints(dec, recs), "seed %d, decoder %+v", seed, dec)
		}
	}
}

// Each hostile input alone is classified as decoding would.
func TestIsCompaction_Exact(t *testing.T) {
	valid := 0
	for _, data := range hostileRecords(t) {
		want := isCompactionByDecoding(record.Decoder{}, data)
		require.Equal(t, want, IsCompaction(record.Decoder{}, data), "%q", data)
		if want {
			valid++
		}
	}
	require.Greater(t, valid, 20, "the inputs hold valid compactions, escaped ones too")
}

func TestIsCompaction_SkipsOtherRecords(t *testing.T) {
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
		require.True(t, IsCompaction(record.Decoder{}, data), "%s", data)
	}
}

func isCompactionByDecoding(dec record.Decoder, data []byte) bool {
	v, err := dec.Decode(data)
	return err == nil && projection.IsValidCompaction(v)
}

func FuzzIsCompaction(f *testing.F) {
	for _, data := range hostileRecords(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := record.Decoder{}
		if got, want := IsCompaction(dec, data), isCompactionByDecoding(dec, data); got != want {
			t.Fatalf("IsCompaction(%q) = %v, decoding says %v", data, got, want)
		}
	})
}

func TestWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := natstest.JetStream(t)
	bucket, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)

	want := map[string]bus.Checkpoint{}
	sessions := map[string]*bus.Checkpoint{}
	for i := range 100 {
		cp := bus.Checkpoint{From: uint64(i), Seq: uint64(2*i + 1)}
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
