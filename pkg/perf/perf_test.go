package perf

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/store"
)

func TestRow_Met(t *testing.T) {
	for _, tt := range []struct {
		name     string
		row      Row
		met, has bool
	}{
		{"no target", Row{Ctxd: 2, Baseline: 1}, false, false},
		{"ratio within max", Row{Ctxd: 1.4, Baseline: 1, Target: Target{MaxRatio: 1.5}}, true, true},
		{"ratio past max", Row{Ctxd: 1.6, Baseline: 1, Target: Target{MaxRatio: 1.5}}, false, true},
		{"ratio at min", Row{Ctxd: 0.8, Baseline: 1, Target: Target{MinRatio: 0.8}}, true, true},
		{"ratio below min", Row{Ctxd: 0.7, Baseline: 1, Target: Target{MinRatio: 0.8}}, false, true},
		{"value within max", Row{Ctxd: 0.004, Baseline: 0.001, Target: Target{MaxValue: 0.005}}, true, true},
		{"value past max", Row{Ctxd: 0.006, Baseline: 0.001, Target: Target{MaxValue: 0.005}}, false, true},
		// Paired rounds: the median of the rounds' ratios, not the ratio
		// of the medians (1.0 / 1.0 here).
		{"paired ratios below min", Row{Ctxd: 1, Baseline: 1, Ratios: []float64{0.7, 0.9, 0.75}, Target: Target{MinRatio: 0.8}}, false, true},
		{"paired ratios at min", Row{Ctxd: 0.5, Baseline: 1, Ratios: []float64{0.7, 0.8, 0.95}, Target: Target{MinRatio: 0.8}}, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			met, has := tt.row.Met()
			require.Equal(t, tt.met, met)
			require.Equal(t, tt.has, has)
		})
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	require.Equal(t, time.Duration(500), percentile(d, .5))
	require.Equal(t, time.Duration(990), percentile(d, .99))
	require.Equal(t, time.Duration(999), percentile(d, .999))
	require.Equal(t, time.Duration(7), percentile([]time.Duration{7}, .999))
	require.Equal(t, time.Duration(0), percentile(nil, .5))
	require.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
}

func TestReport_WriteTable(t *testing.T) {
	rep := &Report{Machine: "test machine", Rows: []Row{
		{Figure: "ingest (records/s)", Kind: Rate, Ctxd: 8000, Baseline: 20000, Target: Target{MinRatio: 0.8}},
		{Figure: "fetch p50", Kind: Latency, Ctxd: 300e-6, Baseline: 250e-6, Target: Target{MaxRatio: 1.5}},
		{Figure: "memory", Kind: Bytes, Ctxd: 3 << 20, Baseline: 1 << 20},
	}}
	var b bytes.Buffer
	require.NoError(t, rep.WriteTable(&b))
	out := b.String()
	require.Contains(t, out, "test machine")
	for _, want := range []string{"8000/s", "20.0k/s", "0.40x", "≥ 0.80x", "| NO ", "300 µs", "1.20x", "| yes ", "3.00 MiB", "3.00x"} {
		require.Contains(t, out, want)
	}
	require.Equal(t, 5, strings.Count(out, "\n|"), out)
}

// The warning under the table when ctxd passed records over, which fails
// TestBench_Smoke in cmd/ctxd.
func TestPassedOver(t *testing.T) {
	require.Empty(t, passedOver("fetch", store.Stats{Records: 98, Rejected: 2, Applied: 100}, 100))
	w := passedOver("fetch", store.Stats{Records: 90, Rejected: 2, Applied: 100}, 100)
	require.Contains(t, w, "fetch: ")
	require.Contains(t, w, "8 records were passed over")
	// Redeliveries do not hide records passed over.
	require.Contains(t, passedOver("ingest", store.Stats{Records: 90, Duplicates: 10, Applied: 100}, 100), "10 records were passed over")
	require.Contains(t, passedOver("cold", store.Stats{Records: 101, Applied: 101}, 100), "something else publishing")
}

func TestConfig_Check(t *testing.T) {
	for _, c := range []Config{Full(), Quick()} {
		require.NoError(t, c.Check())
	}
	c := Quick()
	c.Figures = []string{"fetch", "nope"}
	require.ErrorContains(t, c.Check(), `unknown figure "nope"`)
	c = Quick()
	c.MemorySessions = c.ColdRecords // more than the cold stream holds
	require.Error(t, c.Check())
	c = Full()
	c.IngestRounds = 0
	require.ErrorContains(t, c.Check(), "ingest rounds must be positive")
}

func TestReplySeq(t *testing.T) {
	seq, err := replySeq([]byte(`{"session":"fetch-1000","seq":1234,"messages":[],"dropped":{}}`))
	require.NoError(t, err)
	require.Equal(t, uint64(1234), seq)
	_, err = replySeq([]byte(`{"session":"x","messages":[]}`))
	require.Error(t, err)
}

// TestMemoryRow: the memory figure is the heap freed per session; a heap
// that did not shrink (the process allocated more meanwhile than the
// sessions held) is unmeasured and misses the target, never a negative
// size that meets it.
func TestMemoryRow(t *testing.T) {
	r := memoryRow(4, heap{inuse: 1 << 20}, heap{inuse: 1<<20 - 4096}, 4*2048)
	require.Equal(t, 1024.0, r.Ctxd)
	require.Equal(t, 2048.0, r.Baseline)
	met, ok := r.Met()
	require.True(t, ok)
	require.True(t, met)

	for _, evicted := range []uint64{1 << 20, 1<<20 + 57344*4} {
		r = memoryRow(4, heap{inuse: 1 << 20}, heap{inuse: evicted}, 4*2048)
		require.NotEmpty(t, r.Unmeasured)
		require.GreaterOrEqual(t, r.Ctxd, 0.0)
		met, ok = r.Met()
		require.True(t, ok)
		require.False(t, met)
		rep := &Report{Rows: []Row{r}}
		require.Equal(t, []string{r.Figure}, rep.Missed())
		var b strings.Builder
		require.NoError(t, rep.WriteTable(&b))
		require.Contains(t, b.String(), "| unmeasured |")
		require.NotRegexp(t, `\| -\d`, b.String())
	}
}

// Each baseline of the ingest figure is read by its own consumer only: a
// record published for the ordered consumer reaching the bare durable
// consumer too would make the server deliver it twice, and the ordered
// side, the figure's baseline, slower than it is. The run checks the
// durable consumer's count itself; this runs it small.
func TestIngest_BaselinesApart(t *testing.T) {
	if testing.Short() {
		t.Skip("an embedded server and a small ingest run; -short leaves it to the plain run")
	}
	cfg := Quick()
	cfg.Figures = []string{FigureIngest}
	cfg.Dir = t.TempDir()
	cfg.IngestRecords, cfg.IngestSessions, cfg.IngestRounds = 500, 5, 2
	rep, err := Run(context.Background(), cfg)
	require.NoError(t, err)
	require.NotEmpty(t, rep.Rows)
}
