package checkpoint

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// asJSON is a checkpoint as encoding/json writes its stored form: what
// MarshalJSON wrote before it appended the bytes itself.
func asJSON(t testing.TB, cp Checkpoint) []byte {
	t.Helper()
	out := checkpointJSON{From: cp.From, Seq: cp.Seq, Stream: cp.Stream}
	if cp.Index != "" {
		out.Index = []byte(cp.Index)
	}
	data, err := json.Marshal(out)
	require.NoError(t, err)
	return data
}

func TestCheckpoint_MarshalJSON(t *testing.T) {
	seqs := make([]uint64, MaxSeqs)
	for i := range seqs {
		seqs[i] = uint64(1000*i + 5)
	}
	long := Checkpoint{From: seqs[0], Seq: seqs[len(seqs)-1]}.WithSeqs(seqs)
	require.NotEmpty(t, long.Index)
	for _, tt := range []struct {
		name string
		cp   Checkpoint
	}{
		{"zero", Checkpoint{}},
		{"no index", Checkpoint{From: 5, Seq: 40}},
		{"index", Checkpoint{From: 5, Seq: 40}.WithSeqs([]uint64{5, 40})},
		{"largest sequences", Checkpoint{From: 1<<64 - 2, Seq: 1<<64 - 1}.WithSeqs([]uint64{1<<64 - 2, 1<<64 - 1})},
		{"the longest index", long},
		{"stream", Checkpoint{From: 5, Seq: 40, Stream: "TRANSCRIPTS"}},
		{"stream that JSON escapes", Checkpoint{From: 5, Seq: 40, Stream: "a\"b\\c<d>&e\u2028\x01é"}},
		{"index and stream", Checkpoint{From: 5, Seq: 40, Stream: "T"}.WithSeqs([]uint64{5, 7, 40})},
		{"raw index bytes", Checkpoint{From: 1, Seq: 2, Index: "\xff\x00\xfe"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cp.MarshalJSON()
			require.NoError(t, err)
			require.Equal(t, string(asJSON(t, tt.cp)), string(got))
			viaJSON, err := json.Marshal(tt.cp)
			require.NoError(t, err)
			require.Equal(t, string(got), string(viaJSON), "the same through json.Marshal")
			var back Checkpoint
			require.NoError(t, json.Unmarshal(got, &back))
			require.Equal(t, tt.cp.From, back.From)
			require.Equal(t, tt.cp.Seq, back.Seq)
			require.Equal(t, tt.cp.Stream, back.Stream)
			if _, err := tt.cp.Seqs(); err == nil {
				require.Equal(t, tt.cp.Index, back.Index)
			}
		})
	}
}

// FuzzCheckpoint_MarshalJSON: the bytes appended are encoding/json's.
func FuzzCheckpoint_MarshalJSON(f *testing.F) {
	f.Add(uint64(5), uint64(40), "\x02\x05\x23", "TRANSCRIPTS")
	f.Add(uint64(0), uint64(0), "", "")
	f.Add(uint64(1<<64-1), uint64(1), "\xff", "<&>\"\\\u2029\x7f")
	f.Fuzz(func(t *testing.T, from, seq uint64, index, stream string) {
		cp := Checkpoint{From: from, Seq: seq, Index: index, Stream: stream}
		got, err := cp.MarshalJSON()
		require.NoError(t, err)
		require.Equal(t, string(asJSON(t, cp)), string(got))
	})
}

func BenchmarkCheckpoint_MarshalJSON(b *testing.B) {
	seqs := make([]uint64, 1000)
	for i := range seqs {
		seqs[i] = uint64(500*i + 5)
	}
	cp := Checkpoint{From: seqs[0], Seq: seqs[len(seqs)-1], Stream: "TRANSCRIPTS"}.WithSeqs(seqs)
	b.Run("MarshalJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cp.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		// As a checkpoint was written before: encoding/json's bytes, scanned
		// again by the json.Marshal that called MarshalJSON.
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(viaEncodingJSON{cp}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

type viaEncodingJSON struct{ cp Checkpoint }

func (v viaEncodingJSON) MarshalJSON() ([]byte, error) {
	out := checkpointJSON{From: v.cp.From, Seq: v.cp.Seq, Stream: v.cp.Stream, Index: []byte(v.cp.Index)}
	return json.Marshal(out)
}
