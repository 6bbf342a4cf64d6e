package sessiongen

import (
	"github.com/ctxd/ctxd/pkg/record"
)

// shellRun is a local shell run with every field variant: commands that
// need trimming or are blank, outputs as strings or blocks, exit codes in
// any number form, signals, truncation and exclusion.
func (g *Gen) shellRun() any {
	m := g.message("role", "bashExecution")
	switch g.r.IntN(10) {
	case 0:
		m.Set("command", pick[any](g, "", "  \t\n", int64(1), nil))
	case 1: // missing
	default:
		m.Set("command", pick(g, "pwd", "  git status --short\n", "ls -la", "go test ./...", "echo 'ünïcode'"))
	}
	switch g.r.IntN(6) {
	case 0:
		m.Set("output", []any{
			record.NewMap("type", "text", "text", "a\n"),
			g.imageBlock(),
			record.NewMap("type", "text", "text", int64(5)),
			"stray",
			record.NewMap("type", "text", "text", "b  \n\n"),
		})
	case 1:
		m.Set("output", pick[any](g, []any{}, int64(5), nil))
	case 2: // missing
	default:
		m.Set("output", pick(g, "", "/repo\n", " M src/login.tsx\n", "   \n\t", "ok\n\n  "))
	}
	if !g.chance(6) {
		m.Set("exitCode", pick[any](g, int64(0), int64(0), int64(1), int64(-2), float64(3),
			record.Number("1E1"), record.Number("2.0"), record.Number("2.5"),
			record.Number("18446744073709551617"), uint64(1<<63), "0", nil, true))
	}
	if g.chance(4) {
		m.Set("signal", pick[any](g, "SIGTERM", "", int64(9), nil))
	}
	if g.chance(4) {
		m.Set("truncated", pick[any](g, true, false, "true", int64(1)))
	}
	if g.chance(5) {
		m.Set(pick(g, "excludeFromContext", "excludedFromContext"), pick[any](g, true, true, false, "true", int64(1)))
	}
	return m
}

// extension is a message from an extension: role custom or type
// custom_message, with string, array or other content.
func (g *Gen) extension() any {
	var m *record.Map
	switch g.r.IntN(4) {
	case 0:
		m = g.message("type", "custom_message")
	case 1:
		m = g.message("role", pick(g, "user", "assistant", "note"), "type", "custom_message")
	default:
		m = g.message("role", "custom")
	}
	m.Set("customType", pick(g, "lint", "plan", "memory"))
	switch g.r.IntN(5) {
	case 0, 1:
		m.Set("content", g.text())
	case 2:
		m.Set("content", []any{g.textBlock(), g.imageBlock()})
	case 3:
		m.Set("content", pick[any](g, int64(5), nil, record.NewMap("text", "x"), true))
	case 4: // missing
	}
	if g.chance(2) {
		m.Set("display", g.chance(2))
	}
	switch g.r.IntN(8) {
	case 0, 1:
		m.Set("details", record.NewMap("file", "a.go"))
	case 2:
		m.Set("details", record.NewMap("role", "user"))
	case 3:
		// Only a details map whose role is the string "assistant" makes
		// an assistant message.
		m.Set("details", pick[any](g, "assistant", []any{"assistant"}, nil,
			record.NewMap("role", pick[any](g, "Assistant", "system", int64(1), nil, []any{"assistant"}))))
	case 4:
		m.Set("details", record.NewMap("role", "assistant"))
	}
	return m
}

// assistantExtension is an extension message holding the assistant's own
// words (details.role "assistant"), such as a transcript of its spoken
// reply: an assistant message, whose content may carry calls, tool_result
// blocks (which answer nothing there) and images.
func (g *Gen) assistantExtension() any {
	var m *record.Map
	if g.chance(3) {
		m = g.message("type", "custom_message")
	} else {
		m = g.message("role", "custom")
	}
	m.Set("customType", pick(g, "voice_omni_transcript", "voice_omni_transcript", "narration"))
	switch g.r.IntN(8) {
	case 0, 1, 2:
		m.Set("content", g.text())
	case 3:
		m.Set("content", []any{g.textBlock(), g.imageBlock()})
	case 4, 5:
		// Calls, sometimes alone: a message whose calls are all removed
		// is left with nothing usable.
		var content []any
		if g.chance(2) {
			content = append(content, g.textBlock())
		}
		for range 1 + g.r.IntN(2) {
			content = append(content, g.callBlock())
		}
		m.Set("content", content)
	case 6:
		// A tool_result block: only a user message's answer calls.
		blk := record.NewMap("type", "tool_result")
		if id, hasID, tool := g.resultID(); hasID {
			blk.Set("tool_use_id", id)
			blk.Set("content", g.resultContent(tool))
		}
		m.Set("content", []any{blk})
	default:
		m.Set("content", pick[any](g, []any{}, nil, int64(0), record.NewMap("text", "x")))
	}
	if g.chance(3) {
		m.Set("display", g.chance(2))
	}
	details := record.NewMap("role", "assistant")
	if g.chance(3) {
		details.Set("durationMs", int64(2100))
	}
	m.Set("details", details)
	return m
}
