package edits_test

import (
	"testing"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/render"
)

// BenchmarkApply measures an edited request's work beside one rendering
// of the same context, on a session of 1000 records of the default
// workload, in the Anthropic format: the edits with their estimates
// (before, after, and the trials), then the rendering of the result.
//
//	go test ./pkg/edits -run '^$' -bench . -benchtime 20x
func BenchmarkApply(b *testing.B) {
	p := projection.New(projection.Options{})
	for i, r := range workload.New(1, workload.Default).Session(1000) {
		p.Apply(uint64(i+1), r)
	}
	msgs, seqs := p.Messages(), p.MessageSeqs(nil)
	f := render.Anthropic
	opt := edits.Options{
		Seqs:        seqs,
		Tokens:      func(m []any) int { return render.Tokens(f, m, render.Options{}) },
		ValueTokens: func(v any) int { return render.ValueTokens(f, v) },
	}
	before := opt.Tokens(msgs)
	c := &edits.Config{
		ToolResults: &edits.ToolResults{TriggerTokens: uint64(before / 2), HasTrigger: true, Keep: 3, ClearAtLeastTokens: 5000},
		Thinking:    &edits.Thinking{KeepTurns: 1},
		Images:      &edits.Images{Keep: 3, Batch: 10},
	}
	b.Run("render", func(b *testing.B) {
		for b.Loop() {
			body, _ := render.Render(f, msgs, render.Options{Seqs: seqs})
			body.JSONLen()
		}
	})
	b.Run("edits+render", func(b *testing.B) {
		var rep edits.Report
		for b.Loop() {
			out, s, r := edits.Apply(msgs, c, opt)
			body, _ := render.Render(f, out, render.Options{Seqs: s})
			body.JSONLen()
			rep = r
		}
		b.ReportMetric(float64(len(rep.Cleared)), "cleared")
		b.ReportMetric(float64(rep.TokensBefore), "tokens-before")
		b.ReportMetric(float64(rep.TokensAfter), "tokens-after")
	})
}
