package sessiongen

import (
	"github.com/ctxd/ctxd/pkg/record"
)

// metadata is a record that never reaches the model (unless, like an
// invalid checkpoint or a label with a role, it also looks like a
// message): labels, model and thinking changes, session info, extension
// state, context rows, summary display rows and unknown roles.
func (g *Gen) metadata() any {
	switch g.r.IntN(11) {
	case 0:
		m := g.message("type", "label", "targetId", "e1", "label", "checkpoint")
		if g.chance(3) {
			m.Set("role", "user")
			m.Set("content", "a label that is also a user message")
		}
		return m
	case 1:
		return g.message("type", "model_change", "provider", "anthropic", "modelId", "claude-sonnet")
	case 2:
		return g.message("type", "thinking_level_change", "thinkingLevel", "high")
	case 3:
		return g.message("type", "session_info", "name", "fix the login page")
	case 4:
		return g.message("type", "custom", "customType", "todo", "data", record.NewMap("items", []any{"a"}))
	case 5:
		// A context row is dropped whatever else it looks like.
		return g.message("kind", "context", "role", pick(g, "user", "bashExecution", "custom"), "content", g.text(), "command", "ls")
	case 6:
		return g.message("role", "compactionSummary", "summary", "earlier work", "tokensBefore", int64(9000))
	case 7:
		return g.message("role", "branchSummary", "summary", "a branch", "fromId", "e3")
	case 8:
		return g.message("role", pick[any](g, "developer", "User", int64(5), nil), "content", "x")
	case 9:
		return g.message("kind", pick[any](g, "Context", "state", int64(1)), "role", "user", "content", "kind is not context")
	}
	return record.NewMap()
}

// nonMap is a record that is not a map.
func (g *Gen) nonMap() any {
	return pick[any](g, nil, int64(42), float64(2.5), record.Number("1E3"), "a string",
		true, []any{}, []any{record.NewMap("role", "user", "content", "in an array")})
}

// repeat re-emits a copy of an earlier message: a duplicate call or
// result, redelivered under a new sequence.
func (g *Gen) repeat() any {
	if len(g.history) == 0 {
		return g.userText()
	}
	return deepCopy(g.history[g.r.IntN(len(g.history))])
}
