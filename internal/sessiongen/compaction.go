package sessiongen

import (
	"github.com/ctxd/ctxd/pkg/record"
)

// checkpoint returns a compaction checkpoint with every required field,
// in varied representations, and a snapshot: the tail of the session so
// far, copied, plus fresh records of any shape (nested checkpoints, shell
// runs, context rows and non-maps included).
func (g *Gen) checkpoint() *record.Map {
	var snapshot []any
	if len(g.history) > 0 && !g.chance(5) {
		keep := g.r.IntN(min(len(g.history), 6) + 1)
		for _, h := range g.history[len(g.history)-keep:] {
			snapshot = append(snapshot, deepCopy(h))
		}
	}
	if g.depth < 2 {
		g.depth++
		for range g.r.IntN(4) {
			snapshot = append(snapshot, g.Record())
		}
		g.depth--
	}
	if snapshot == nil {
		snapshot = []any{}
	}
	m := record.NewMap(
		"type", "compaction",
		"at", "2025-11-30T10:00:00Z",
		"baseSeq", pick[any](g, int64(12), float64(2), record.Number("3.0"), record.Number("1E1")),
		"plannerVersion", pick[any](g, int64(1), record.Number("2.0")),
		"summaryModelRef", "claude-haiku",
		"summary", "the user asked to fix the login page",
		"qualityAudit", pick(g, "passed", "disabled"),
		"messages", snapshot,
		"firstKeptIndex", pick[any](g, int64(4), float64(0.5), record.Number("7")),
		"tokensBefore", int64(120000),
		"tokensAfter", pick[any](g, int64(9000), float64(1.5)),
	)
	if g.chance(3) {
		m.Set("handover", record.NewMap("next", "run the tests"))
	}
	if g.chance(3) {
		m.Set("audit", record.NewMap("score", float64(0.9)))
	}
	if g.chance(4) {
		m.Set("restoredFromCompactionId", "cp1")
	}
	return m
}

// compaction is a valid checkpoint: it replaces the context.
func (g *Gen) compaction() any {
	m := g.checkpoint()
	snapshot, _ := m.Get("messages")
	g.history = nil
	for _, v := range snapshot.([]any) {
		if g.rules.Convert(v) != nil && !g.rules.IsValidCompaction(v) {
			g.history = append(g.history, v)
		}
	}
	return m
}

// invalidCompaction is a checkpoint with one field missing or wrong: it
// resets nothing, and passes through when it also has a message role.
func (g *Gen) invalidCompaction() any {
	m := g.checkpoint()
	switch g.r.IntN(12) {
	case 0:
		m.Set("qualityAudit", pick[any](g, "failed", nil, true))
	case 1:
		m.Set("handover", nil)
	case 2:
		m.Set("audit", pick[any](g, "fine", []any{}))
	case 3:
		m.Set("messages", pick[any](g, nil, "none", record.NewMap()))
	case 4:
		m.Set("baseSeq", pick[any](g, float64(2.5), record.Number("1.5"), "12"))
	case 5:
		m.Set("at", int64(1764493200000))
	case 6:
		m.Set("tokensAfter", "9000")
	case 7:
		m.Set("summary", nil)
	case 8:
		// The legacy shape.
		return record.NewMap("type", "compaction", "summary", "old", "firstKeptEntryId", "e4", "tokensBefore", int64(5))
	case 9:
		m.Set("role", "user")
		m.Set("content", "an invalid checkpoint that is also a user message")
		m.Set("qualityAudit", "failed")
	case 10:
		m.Set("type", "Compaction")
	default:
		drop := pick(g, "at", "baseSeq", "plannerVersion", "summaryModelRef", "summary",
			"qualityAudit", "messages", "firstKeptIndex", "tokensBefore", "tokensAfter")
		kept := m.Members[:0:0]
		for _, mem := range m.Members {
			if mem.Key != drop {
				kept = append(kept, mem)
			}
		}
		m.Members = kept
	}
	return m
}
