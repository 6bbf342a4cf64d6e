package sessiongen

import (
	"github.com/ctxd/ctxd/pkg/record"
)

// userText is a user's plain prompt.
func (g *Gen) userText() any {
	return g.message("role", "user", "content", g.text())
}

// userBlocks is a user prompt as blocks, with uploaded images.
func (g *Gen) userBlocks() any {
	content := []any{g.textBlock()}
	for range g.r.IntN(3) {
		content = append(content, pick(g, g.imageBlock(), g.textBlock()))
	}
	if g.chance(8) {
		content = []any{}
	}
	m := g.message("role", "user", "content", content)
	if g.chance(6) {
		m.Set("unknownField", record.NewMap("kept", true))
	}
	return m
}

// system is a system prompt.
func (g *Gen) system() any {
	return g.message("role", "system", "content", pick[any](g, "You are a careful agent.", []any{g.textBlock()}))
}

// assistantText is a reply without calls, as a string or as blocks.
func (g *Gen) assistantText() any {
	var content any
	switch g.r.IntN(4) {
	case 0:
		content = g.text()
	case 1:
		content = []any{g.textBlock()}
	case 2:
		content = []any{g.thinkingBlock(), g.textBlock()}
	default:
		content = []any{g.thinkingBlock()}
	}
	m := g.message("role", "assistant", "content", content)
	if g.chance(3) {
		m.Set("usage", record.NewMap("input", int64(1200), "output", int64(80)))
		m.Set("stopReason", "stop")
	}
	return m
}

// assistantEmpty is an assistant message with nothing usable, or with
// content of an unusual type that counts as usable.
func (g *Gen) assistantEmpty() any {
	m := g.message("role", "assistant")
	switch g.r.IntN(7) {
	case 0: // content missing
	case 1:
		m.Set("content", nil)
	case 2:
		m.Set("content", []any{})
	case 3:
		m.Set("content", "  \n")
	case 4:
		m.Set("content", int64(0))
	case 5:
		m.Set("content", record.NewMap("text", "a map"))
	case 6:
		m.Set("content", "")
		m.Set("tool_calls", pick[any](g, nil, "none", record.NewMap(), []any{}))
	}
	return m
}

// callBlock is one call inside assistant content, with any of the id
// fields and block types.
func (g *Gen) callBlock() *record.Map {
	b := record.NewMap("type", pick(g, "toolCall", "tool_use", "tool_call"))
	id, hasID := g.callID()
	name, hasName := g.toolName()
	if hasID {
		switch g.r.IntN(6) {
		case 0:
			b.Set("toolCallId", id)
		case 1:
			b.Set("tool_call_id", id)
		case 2:
			b.Set("tool_call_id$", id)
		case 3:
			// A non-string first field: the id is the first string.
			b.Set("id", int64(1))
			b.Set("toolCallId", id)
		default:
			b.Set("id", id)
		}
		g.remember(firstStringOf(b), name)
	}
	if hasName {
		b.Set("name", name)
	}
	g.maybeProviderExecuted(b)
	args := record.NewMap("action", pick(g, "click", "open", "ls"))
	if t, _ := b.String("type"); t == "tool_use" {
		b.Set("input", args)
	} else {
		b.Set("arguments", args)
	}
	return b
}

// assistantCalls is an assistant message calling tools with content
// blocks, with text, thinking and stray non-map elements around them.
func (g *Gen) assistantCalls() any {
	var content []any
	if g.chance(2) {
		content = append(content, g.textBlock())
	}
	if g.chance(4) {
		content = append(content, g.thinkingBlock())
	}
	for range 1 + g.r.IntN(3) {
		content = append(content, g.callBlock())
		if g.chance(8) {
			content = append(content, pick[any](g, "raw string block", nil, int64(5)))
		}
	}
	m := g.message("role", "assistant", "content", content)
	if g.chance(10) {
		m.Set("tool_calls", []any{g.openAIEntry()})
	}
	return m
}

// openAIEntry is one entry of an OpenAI tool_calls array.
func (g *Gen) openAIEntry() any {
	if g.chance(15) {
		return pick[any](g, "not a map", nil)
	}
	e := record.NewMap()
	id, hasID := g.callID()
	if hasID {
		e.Set("id", id)
	}
	name, hasName := g.toolName()
	e.Set("type", "function")
	switch g.r.IntN(5) {
	case 0: // name beside the entry, no function
		if hasName {
			e.Set("name", name)
		}
	case 1: // function.name not a string: the entry's name counts
		e.Set("function", record.NewMap("name", int64(1), "arguments", "{}"))
		if hasName {
			e.Set("name", name)
		}
	default:
		f := record.NewMap("arguments", `{"cmd":"ls"}`)
		if hasName {
			f.Set("name", name)
		}
		e.Set("function", f)
		if g.chance(6) {
			e.Set("name", "bash") // function.name wins
		}
	}
	g.maybeProviderExecuted(e)
	g.remember(id, toolCallName(e))
	return e
}

// maybeProviderExecuted marks a call block or tool_calls entry as run by
// the provider now and then, and sometimes gives it a providerExecuted
// that is not the boolean true and so changes nothing.
func (g *Gen) maybeProviderExecuted(call *record.Map) {
	switch g.r.IntN(12) {
	case 0, 1:
		call.Set("providerExecuted", true)
	case 2:
		call.Set("providerExecuted", pick[any](g, "true", int64(1), float64(1), false, nil))
	}
}

// assistantOpenAI is an OpenAI-style message with tool_calls entries.
func (g *Gen) assistantOpenAI() any {
	entries := []any{}
	for range 1 + g.r.IntN(3) {
		entries = append(entries, g.openAIEntry())
	}
	m := g.message("role", "assistant")
	switch g.r.IntN(4) {
	case 0:
		m.Set("content", "")
	case 1:
		m.Set("content", nil)
	case 2:
		m.Set("content", g.text())
	}
	m.Set("tool_calls", entries)
	return m
}
