package main

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// buildRendered prints the context of the records rendered in format f:
// the body, and with dropped the passes' and the renderer's reports.
func buildRendered(e *env, f render.Format, values []any, browser []string, dropped bool) error {
	opt := projection.Options{BrowserTools: browser}
	s := projection.New(opt) // equals Build, and knows each message's record
	for i, v := range projection.Numbered(values) {
		s.Apply(v.Seq, values[i])
	}
	body, rep := render.Render(f, s.Messages(), render.Options{Seqs: s.MessageSeqs(nil), BrowserTools: browser})
	out := body.Fields
	if dropped {
		out = out.Clone()
		out.Set("dropped", s.Dropped().Map())
		out.Set("render", rep.Map(f))
	}
	b, err := record.MarshalJSON(out)
	if err != nil {
		return fmt.Errorf("encode context: %w", err)
	}
	return e.writeJSON(b)
}
