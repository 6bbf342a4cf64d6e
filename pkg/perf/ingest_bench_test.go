package perf

import (
	"context"
	"flag"
	"testing"
)

var (
	ingestRecords  = flag.Int("ingest.records", 100_000, "BenchmarkIngest: records published per round")
	ingestSessions = flag.Int("ingest.sessions", 500, "BenchmarkIngest: live sessions the records go to")
	ingestRounds   = flag.Int("ingest.rounds", 3, "BenchmarkIngest: rounds; the medians are reported (of the rounds' ratios for the ratios). 3, as its figures in docs/PERFORMANCE.md were measured; ctxd bench runs 5 (3 with --quick)")
	ingestProfiles = flag.String("ingest.cpuprofiles", "", "BenchmarkIngest: `DIR` for a CPU profile of each side of each round (ctxd-1.prof, ordered-1.prof, ...)")
)

// BenchmarkIngest is the ingest figure of ctxd bench, on text records
// (483 bytes on average): ctxd's records/s from the first publish until
// it has applied the last, beside the same records published while an
// ordered consumer that does nothing reads along, in the same run, on
// the same embedded server; and the ratio, whose target is 0.8. The
// ordered consumer's second run against its first (aa-ratio, A/A) shows
// what a run's ratio moves by when nothing differs. The raw publish and
// the bare durable consumer are reported too. One op is
// a whole run of -ingest.rounds rounds: run it with -benchtime 1x.
func BenchmarkIngest(b *testing.B) {
	cfg := Quick()
	cfg.Figures = []string{FigureIngest}
	cfg.ScreenshotBytes = 0
	cfg.IngestRecords, cfg.IngestSessions, cfg.IngestRounds = *ingestRecords, *ingestSessions, *ingestRounds
	if testing.Short() {
		cfg.IngestRecords = min(cfg.IngestRecords, 10_000)
	}
	cfg.IngestProfiles = *ingestProfiles
	cfg.Progress = testWriter{b}
	var rep *Report
	for b.Loop() {
		var err error
		if rep, err = Run(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
	}
	if len(rep.Rows) < 4 {
		b.Fatalf("the ingest figure gave %d rows", len(rep.Rows))
	}
	for _, w := range rep.Warnings {
		b.Error(w)
	}
	ordered, aa, raw, bare := rep.Rows[0], rep.Rows[1], rep.Rows[2], rep.Rows[3]
	b.ReportMetric(ordered.Ctxd, "ctxd-records/s")
	b.ReportMetric(ordered.Baseline, "ordered-records/s")
	b.ReportMetric(ordered.Ratio(), "ratio")
	b.ReportMetric(aa.Ratio(), "aa-ratio")
	b.ReportMetric(raw.Baseline, "raw-records/s")
	b.ReportMetric(bare.Baseline, "bare-records/s")
}

// testWriter sends the run's progress to the benchmark's log.
type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(p[:len(p)-min(1, len(p))]))
	return len(p), nil
}
