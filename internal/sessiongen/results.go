package sessiongen

import (
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// recall is an assistant message calling again with an earlier call's id,
// perhaps naming another tool: a retry, or a runtime reusing ids. It is
// how an id becomes a browser call's id after its results arrived.
func (g *Gen) recall() any {
	if len(g.calls) == 0 {
		return g.assistantCalls()
	}
	c := g.calls[g.r.IntN(len(g.calls))]
	name, _ := g.toolName()
	g.remember(c.id, name)
	if g.chance(3) {
		e := record.NewMap("id", c.id, "type", "function", "function", record.NewMap("name", name, "arguments", "{}"))
		g.maybeProviderExecuted(e)
		return g.message("role", "assistant", "content", g.text(), "tool_calls", []any{e})
	}
	blk := record.NewMap("type", pick(g, "toolCall", "tool_use", "tool_call"), "id", c.id, "name", name)
	g.maybeProviderExecuted(blk)
	return g.message("role", "assistant", "content", []any{blk})
}

// misplacedCall puts call blocks where they are not calls: in a user or
// result message.
func (g *Gen) misplacedCall() any {
	id, _ := g.callID()
	blk := record.NewMap("type", "toolCall", "id", id, "name", "browser_use")
	if g.chance(2) {
		return g.message("role", "user", "content", []any{blk})
	}
	return g.message("role", "toolResult", "toolCallId", id, "content", []any{blk})
}

// resultContent is what a tool returned: screenshots for browser tools
// most of the time, text otherwise, and now and then images from any tool.
func (g *Gen) resultContent(tool string) any {
	if strings.Contains(tool, "browser") || tool == "screenshot" || g.chance(4) {
		if !g.chance(5) {
			return g.screenshots()
		}
	}
	return pick[any](g, g.text(), []any{g.textBlock()}, []any{})
}

// toolResult is a result message, role toolResult or tool, with any of the
// id fields.
func (g *Gen) toolResult() any {
	id, hasID, tool := g.resultID()
	m := g.message("role", pick(g, "toolResult", "toolResult", "tool"))
	if hasID {
		switch g.r.IntN(5) {
		case 0:
			m.Set("tool_call_id", id)
		case 1:
			m.Set("tool_call_id$", id)
		case 2:
			m.Set("toolCallId", int64(9)) // not a string: the next field counts
			m.Set("tool_call_id", id)
		default:
			m.Set("toolCallId", id)
		}
	}
	if g.chance(2) {
		m.Set("toolName", pick(g, tool, "browser_use", "bash"))
	}
	m.Set("content", g.resultContent(tool))
	if g.chance(8) {
		m.Set("isError", true)
	}
	return m
}

// anthropicResults is a user message carrying tool_result blocks, several
// at a time, mixed with text and uploaded images.
func (g *Gen) anthropicResults() any {
	var content []any
	for range 1 + g.r.IntN(3) {
		if g.chance(4) {
			content = append(content, pick(g, g.textBlock(), g.imageBlock()))
		}
		blk := record.NewMap("type", "tool_result")
		id, hasID, tool := g.resultID()
		if hasID {
			blk.Set("tool_use_id", id)
		}
		blk.Set("content", g.resultContent(tool))
		if g.chance(10) {
			blk.Set("is_error", true)
		}
		content = append(content, blk)
	}
	if g.chance(4) {
		content = append(content, g.textBlock())
	}
	return g.message("role", "user", "content", content)
}
