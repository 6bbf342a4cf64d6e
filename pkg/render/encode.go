package render

import "github.com/ctxd/ctxd/pkg/record"

// Map returns the report as it goes on the wire (RENDER.md, "The
// report"): {"changes": [...], "ends_with_assistant": bool} and, for
// Anthropic, "cache_breakpoint".
func (r Report) Map(f Format) *record.Map {
	changes := make([]any, len(r.Changes))
	for i, c := range r.Changes {
		changes[i] = c.Map()
	}
	m := record.NewMap("changes", changes, "ends_with_assistant", r.EndsWithAssistant)
	if providerOf(f).breakpoint {
		var bp any
		if r.CacheBreakpoint != nil {
			bp = record.NewMap("message", int64(r.CacheBreakpoint.Message), "block", int64(r.CacheBreakpoint.Block))
		}
		m.Set("cache_breakpoint", bp)
	}
	return m
}

// Map returns a change as it goes on the wire: "change" and "message"
// always, the other fields when they say something.
func (c Change) Map() *record.Map {
	m := record.NewMap("change", c.Kind, "message", int64(c.Message))
	if c.Block >= 0 {
		m.Set("block", int64(c.Block))
	}
	if c.Seq > 0 {
		m.Set("seq", c.Seq)
	}
	if c.ID != "" || c.Kind == IDRenamed {
		m.Set("id", c.ID)
	}
	if c.To != "" {
		m.Set("to", c.To)
	}
	if c.Kind == MessagesMerged {
		m.Set("into", int64(c.Into))
	}
	if c.Reason != "" {
		m.Set("reason", c.Reason)
	}
	return m
}

// Map returns the usage as it goes on the wire.
func (u Usage) Map() *record.Map {
	return record.NewMap("bytes", int64(u.Bytes), "images", int64(u.Images), "input_tokens", int64(u.InputTokens))
}

// Map returns the budget as it goes on the wire; compact_before_seq only
// when over.
func (b Budget) Map() *record.Map {
	m := record.NewMap("tokens", b.Tokens, "over", b.Over)
	if b.Over {
		m.Set("compact_before_seq", b.CompactBeforeSeq)
	}
	return m
}
