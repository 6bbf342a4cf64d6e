package projection

import (
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
