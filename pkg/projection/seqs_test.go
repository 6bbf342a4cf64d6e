package projection

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

func TestSession_MessageSeqs(t *testing.T) {
	s := New(Options{})
	recs := []string{
		`{"role":"user","content":"q"}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"x","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"zz","content":"orphan"}`,
		`{"role":"toolResult","toolCallId":"c1","content":"r"}`,
		`{"type":"compaction","at":"2026-08-05T00:00:00.000Z","baseSeq":2,"plannerVersion":2,"summaryModelRef":"m","qualityAudit":"passed","summary":"s","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"firstKeptIndex":1,"tokensBefore":1,"tokensAfter":1}`,
		`{"role":"user","content":"c"}`,
	}
	want := [][]uint64{{1}, {1}, {1}, {1, 2, 4}, {5, 5}, {5, 5, 6}}
	for i, r := range recs {
		v, err := record.DecodeJSON([]byte(r))
		require.NoError(t, err)
		before := s.Version()
		s.Apply(uint64(i+1), v)
		got := s.MessageSeqs(nil)
		require.Equal(t, want[i], got, "after record %d", i+1)
		require.Len(t, got, len(s.Messages()))
		if i == 2 {
			continue // an orphan changes the report, not necessarily the view
		}
		require.NotEqual(t, before, s.Version(), "after record %d", i+1)
	}
}

// TestSession_MessageSeqsFrom: from any message on, the sequences
// MessageSeqs gives from there, over generated sessions grown a record at
// a time.
func TestSession_MessageSeqsFrom(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		g := newGen(rand.New(rand.NewPCG(seed, 7)))
		s := New(Options{BrowserTools: g.BrowserTools()})
		for i, v := range g.Session(60) {
			s.Apply(uint64(i+1), v)
			all := s.MessageSeqs(nil)
			for k := 0; k <= len(all); k++ {
				require.Equal(t, append([]uint64{}, all[k:]...), s.MessageSeqsFrom([]uint64{}, k), "seed %d, record %d, from %d", seed, i+1, k)
			}
		}
	}
}
