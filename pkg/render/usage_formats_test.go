package render_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tiktoken-go/tokenizer"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// bodyTokens counts a rendered body's tokens with o200k_base the way
// openaiTokens does, in any format: every string the model reads, 3 a
// message (or item, or content), 3 for the reply; images (counted by
// formula on both sides) and thinking signatures (opaque to the model)
// left out. For Anthropic and Gemini, whose tokenizers are not
// published, o200k_base stands in for theirs.
func bodyTokens(t testing.TB, enc tokenizer.Codec, b render.Body) int {
	n := 3
	for _, m := range b.Fields.Members {
		switch v := m.Value.(type) {
		case []any:
			for _, it := range v {
				n += 3 + readTokens(t, enc, it)
			}
		default:
			n += readTokens(t, enc, v)
		}
	}
	return n
}

// readTokens is stringTokens for every format's shapes.
func readTokens(t testing.TB, enc tokenizer.Codec, v any) int {
	switch x := v.(type) {
	case []any:
		n := 0
		for _, e := range x {
			n += readTokens(t, enc, e)
		}
		return n
	case *record.Map:
		switch typ, _ := x.String("type"); typ {
		case "image", "image_url", "input_image", "redacted_thinking":
			return 0
		}
		n := 0
		for _, m := range x.Members {
			switch m.Key {
			case "type", "inlineData", "signature", "thoughtSignature":
				continue
			}
			n += readTokens(t, enc, m.Value)
		}
		return n
	}
	return stringTokens(t, enc, v)
}

// bodyText is the estimate without its images (which both sides count
// by formula); thinking signatures it counts as text.
func bodyText(b render.Body) int { return textTokens(b) }

// TestEstimate_Formats measures the estimate against o200k_base on the
// real transcripts' contexts in every format, as docs/EDITS.md gives
// it: the sum of the estimates over the sum of the counts, and the range
// of the ratio over contexts of 1 000 tokens and more. Run with -v for
// the table:
//
//	go test ./pkg/render -run TestEstimate_Formats -v
func TestEstimate_Formats(t *testing.T) {
	enc, err := tokenizer.Get(tokenizer.O200kBase)
	require.NoError(t, err)
	ctxs := sampleContexts(t)
	names := make([]string, 0, len(ctxs))
	for k := range ctxs {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, f := range render.Formats {
		var ratios []float64
		est, ref := 0, 0
		for _, name := range names {
			b, _ := render.Render(f, ctxs[name], render.Options{})
			r, e := bodyTokens(t, enc, b), bodyText(b)
			if r < 1000 {
				continue
			}
			est += e
			ref += r
			ratios = append(ratios, float64(e)/float64(r))
			if testing.Verbose() {
				t.Logf("%-16s %-60s o200k %7d estimate %7d ratio %.2f", f, name, r, e, float64(e)/float64(r))
			}
		}
		slices.Sort(ratios)
		agg := float64(est) / float64(ref)
		t.Logf("%-16s %d contexts of 1000+ tokens: sum estimate/o200k %.3f; per context min %.2f median %.2f max %.2f",
			f, len(ratios), agg, ratios[0], ratios[len(ratios)/2], ratios[len(ratios)-1])
		require.InDelta(t, 1, agg, 0.1, "%s: the estimate within 10%% of o200k_base over the samples", f)
	}
}

// largestSample is the largest sample context, rendered for OpenAI Chat.
func largestSample(b *testing.B) render.Body {
	var best []any
	bestLen := 0
	for _, msgs := range sampleContexts(b) {
		if n, _ := record.JSONLen(msgs); n > bestLen {
			best, bestLen = msgs, n
		}
	}
	body, _ := render.Render(render.OpenAIChat, best, render.Options{})
	return body
}

// BenchmarkEstimate_Sample and BenchmarkO200k_Sample compare the cost of
// the estimate with a count by o200k_base on the largest sample context:
// whether a tokenizer could serve as the estimate.
//
//	go test ./pkg/render -run '^$' -bench 'Sample$' -benchtime 20x
func BenchmarkEstimate_Sample(b *testing.B) {
	body := largestSample(b)
	n, _ := body.JSONLen()
	b.SetBytes(int64(n))
	for b.Loop() {
		m, _ := body.JSONLen()
		render.Estimate(body, m)
	}
}

func BenchmarkO200k_Sample(b *testing.B) {
	enc, err := tokenizer.Get(tokenizer.O200kBase)
	require.NoError(b, err)
	body := largestSample(b)
	n, _ := body.JSONLen()
	b.SetBytes(int64(n))
	for b.Loop() {
		bodyTokens(b, enc, body)
	}
}
