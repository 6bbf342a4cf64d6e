package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

func TestLimits_Resets(t *testing.T) {
	compaction := record.NewMap("type", "compaction", "at", "2026-01-01T00:00:00Z", "baseSeq", int64(1), "plannerVersion", int64(1),
		"summaryModelRef", "m", "summary", "s", "qualityAudit", "passed", "messages", []any{},
		"firstKeptIndex", int64(0), "tokensBefore", int64(1), "tokensAfter", int64(1))
	for _, tc := range []struct {
		name string
		lim  Limits
		v    any
		n    int
		want bool
	}{
		{"valid, no bound", Limits{}, compaction, 1 << 30, true},
		{"valid, within the bound", Limits{MaxSessionBytes: 100}, compaction, 100, true},
		{"valid, larger than a session may hold", Limits{MaxSessionBytes: 100}, compaction, 101, false},
		{"not a compaction", Limits{}, record.NewMap("role", "user"), 10, false},
		{"not a map", Limits{}, "compaction", 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.lim.Resets(tc.v, tc.n))
		})
	}
}

func TestLimits_Weigh(t *testing.T) {
	lim := Limits{MaxSessionBytes: 100}
	w, err := lim.Weigh(0, 60, false)
	require.NoError(t, err)
	require.EqualValues(t, 60, w)
	w, err = lim.Weigh(w, 41, false)
	require.ErrorIs(t, err, ErrQuarantined)
	require.EqualValues(t, 60, w, "a quarantined record weighs nothing")
	w, err = lim.Weigh(w, 40, false)
	require.NoError(t, err)
	require.EqualValues(t, 100, w, "exactly the bound is allowed")
	w, err = lim.Weigh(w, 90, true)
	require.NoError(t, err)
	require.EqualValues(t, 90, w, "a compaction starts the weight afresh")
	w, err = (Limits{}).Weigh(1<<40, 1<<30, false)
	require.NoError(t, err, "no bound")
	require.EqualValues(t, 1<<40+1<<30, w)
}
