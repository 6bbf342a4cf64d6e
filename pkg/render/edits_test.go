package render_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/render"
)

// TestRender_Edited renders generated sessions with random edits applied
// in every format: every body passes the validator, and the provider's
// schema where there is one; the edits leave every call with its result.
func TestRender_Edited(t *testing.T) {
	n := 600
	if testing.Short() {
		n = 150
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		msgs, opt := generated(seed)
		r := rand.New(rand.NewPCG(seed, 3))
		for _, f := range providers {
			before := render.Tokens(f, msgs, render.Options{})
			c := &edits.Config{
				ToolResults: &edits.ToolResults{TriggerTokens: uint64(r.IntN(before + 1)), HasTrigger: true, Keep: r.IntN(3),
					ClearAtLeastTokens: uint64(r.IntN(2) * 100), ClearInputs: r.IntN(2) == 0},
				Thinking: &edits.Thinking{KeepTurns: r.IntN(2)},
				Images:   &edits.Images{Keep: r.IntN(3), Batch: 1 + r.IntN(2)},
			}
			out, seqs, _ := edits.Apply(msgs, c, edits.Options{
				Seqs:        opt.Seqs,
				Tokens:      func(m []any) int { return render.Tokens(f, m, render.Options{}) },
				ValueTokens: func(v any) int { return render.ValueTokens(f, v) },
			})
			eopt := opt
			eopt.Seqs = seqs
			raw, body, rep := rendered(t, f, out, eopt)
			what := fmt.Sprintf("seed %d, edits %s", seed, mustJSON(c.Map()))
			requireValid(t, f, body, raw, what)
			if slices.Contains(schemaFormats, f) {
				if err := checkSchema(t, f, raw, rep.CacheBreakpoint); err != nil {
					t.Fatalf("%s: %s body fails the schema:\n%v\nbody: %.3000s", what, f, err, raw)
				}
			}
			// No call or result is lost to the edits: the rendering removes
			// no more of them than of the unedited context (fewer, where a
			// cleared result no longer holds what the provider refuses).
			_, _, plain := rendered(t, f, msgs, opt)
			require.LessOrEqual(t, countKind(rep, render.CallRemoved), countKind(plain, render.CallRemoved), "%s %s", what, f)
			require.LessOrEqual(t, countKind(rep, render.ResultRemoved), countKind(plain, render.ResultRemoved), "%s %s", what, f)
		}
	}
}

func countKind(r render.Report, kind string) int {
	n := 0
	for _, c := range r.Changes {
		if c.Kind == kind {
			n++
		}
	}
	return n
}
