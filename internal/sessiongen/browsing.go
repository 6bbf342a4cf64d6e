package sessiongen

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/record"
)

// Browsing returns n records of a browsing agent's session: mostly
// browser calls answered by screenshots, one or several images each, with
// everything that decides which screenshot the context keeps mixed in:
// screenshots of tools that are not browser tools (and of the tool some
// Options count as one), results answering a call again, results sent
// before their call (orphans), an id whose result came with a non-browser
// call and that a browser call takes up later, several screenshots in one
// user message, extension messages and uploads with images, and
// compactions that keep some screenshots of the session. A third of the
// records are of any shape, as Record makes them.
func (g *Gen) Browsing(n int) []any {
	out := make([]any, 0, n)
	var orphans []string // ids answered before any call
	for len(out) < n {
		var v any
		switch k := g.r.IntN(40); {
		case k < 13:
			v = g.browserCall()
		case k < 22:
			v = g.screenshot(false)
		case k < 24:
			v = g.screenshot(true) // a paired id answered again
		case k < 26:
			v = g.anthropicResults()
		case k < 27:
			// A screenshot before its call: an orphan, whatever follows.
			g.unique++
			id := fmt.Sprintf("o%d", g.unique)
			orphans = append(orphans, id)
			v = g.message("role", "toolResult", "toolCallId", id, "toolName", "browser_use", "content", g.screenshots())
		case k < 28 && len(orphans) > 0:
			id := orphans[g.r.IntN(len(orphans))]
			v = g.message("role", "assistant", "content", []any{record.NewMap("type", "toolCall", "id", id, "name", "browser_use", "arguments", record.NewMap())})
		case k < 29 && len(g.calls) > 0:
			// A call of another tool, or a browser one, taking up an id
			// already answered.
			c := g.calls[g.r.IntN(len(g.calls))]
			name := pick(g, "browser_use", "screenshot", "bash")
			v = g.message("role", "assistant", "content", []any{record.NewMap("type", "toolCall", "id", c.id, "name", name, "arguments", record.NewMap())})
			g.remember(c.id, name)
		case k < 30:
			v = g.extension()
		case k < 32:
			v = g.compaction()
		default:
			v = g.Record()
			out = append(out, v)
			continue
		}
		if m, ok := v.(*record.Map); ok && g.rules.Convert(m) != nil && !g.rules.IsValidCompaction(m) {
			g.history = append(g.history, v)
		}
		out = append(out, v)
	}
	return out
}

// browserCall is an assistant message calling a tool, most often a
// browser tool, with a fresh id or one of the pool.
func (g *Gen) browserCall() any {
	var id string
	if g.chance(3) {
		id = pick(g, idPool...)
	} else {
		g.unique++
		id = fmt.Sprintf("u%d", g.unique)
	}
	name := pick(g, "browser_use", "browser_use", "browser_use", "screenshot", "bash")
	g.remember(id, name)
	content := []any{record.NewMap("type", pick(g, "toolCall", "tool_use"), "id", id, "name", name, "arguments", record.NewMap("action", "click"))}
	if g.chance(4) {
		content = append([]any{g.textBlock()}, content...)
	}
	return g.message("role", "assistant", "content", content)
}

// screenshot is the result of a recent call, or with again of any call
// made so far, holding images most of the time.
func (g *Gen) screenshot(again bool) any {
	if len(g.calls) == 0 {
		return g.toolResult()
	}
	i := len(g.calls) - 1 - g.r.IntN(min(len(g.calls), 2))
	if again {
		i = g.r.IntN(len(g.calls))
	}
	c := g.calls[i]
	content := g.screenshots()
	if g.chance(2) {
		content = append(content, g.imageBlock())
	}
	if g.chance(3) {
		blk := record.NewMap("type", "tool_result", "tool_use_id", c.id, "content", content)
		return g.message("role", "user", "content", []any{blk})
	}
	return g.message("role", pick(g, "toolResult", "tool"), "toolCallId", c.id, "toolName", c.tool, "content", content)
}

// screenshots returns result content with zero to two images among text.
func (g *Gen) screenshots() []any {
	content := []any{}
	if !g.chance(3) {
		content = append(content, g.textBlock())
	}
	for range g.r.IntN(3) {
		content = append(content, g.imageBlock())
	}
	if g.chance(4) {
		content = append(content, g.textBlock())
	}
	return content
}
