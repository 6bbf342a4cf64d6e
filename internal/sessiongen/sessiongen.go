// Package sessiongen generates random sessions of records for the tests
// of the projection and of what is built on it: every shape a record can
// take under docs/CONTEXT.md, hostile ones included, with the pairing and
// compaction corner cases made frequent.
package sessiongen

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// Gen generates realistic random sessions: the records an agent runtime
// stores, with the irregularities real transcripts have (calls never
// answered, results for unknown ids, duplicates, checkpoints, rows of
// metadata, values that are not maps). Ids come from a small pool so that
// the pairing corner cases of CONTEXT.md section 3 happen often.
//
// A Gen is deterministic: the same *rand.Rand state gives the same
// session. Each shape of record has its own method, named for the shape.
type Gen struct {
	r     *rand.Rand
	rules Rules

	// calls are the calls made so far, oldest first: results answer them,
	// usually soon, sometimes long after.
	calls []genCall
	// history holds the message-like records so far, the material a
	// compaction snapshot keeps.
	history []any
	// depth is the compaction nesting of the record being generated.
	depth int
	// unique numbers the ids that collide with nothing.
	unique int
}

type genCall struct {
	id, tool string
}

// idPool is small on purpose: ids collide often.
var idPool = []string{"c1", "c2", "c3", "c4", "c5", "b1", "b2"}

// toolNames mixes the default browser tool, a tool that only some Options
// treat as a browser tool, and ordinary tools.
var toolNames = []string{"browser_use", "browser_use", "browser_use", "screenshot", "bash", "read", "edit", "web_search"}

// Rules are what the generator needs of the context rules, from package
// projection, which cannot be imported here: its own tests use this
// package.
type Rules struct {
	// Convert is pass 1 for one record: the message it becomes, or nil.
	Convert func(v any) *record.Map
	// IsValidCompaction reports a valid compaction (CONTEXT.md section 4).
	IsValidCompaction func(v any) bool
}

// New returns a generator drawing from r.
func New(r *rand.Rand, rules Rules) *Gen { return &Gen{r: r, rules: rules} }

// BrowserTools picks the browser tool set a session is projected with
// (projection.Options.BrowserTools); nil is the default set.
func (g *Gen) BrowserTools() []string {
	switch g.r.IntN(10) {
	case 0:
		return []string{"browser_use", "screenshot"}
	case 1:
		return []string{} // nothing is trimmed
	case 2:
		return []string{"bash"}
	case 3:
		// A call without a string name has tool "": listed, it is a
		// browser call too.
		return []string{"", "browser_use"}
	}
	return nil
}

// Session returns n records.
func (g *Gen) Session(n int) []any {
	out := make([]any, 0, n)
	for len(out) < n {
		out = append(out, g.Record())
	}
	return out
}

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

// Record returns one record of a random shape, weighted roughly like a
// real session: mostly calls and results, some talk, a little of the rest.
func (g *Gen) Record() any {
	shapes := []struct {
		weight int
		make   func() any
	}{
		{8, g.userText},
		{4, g.userBlocks},
		{6, g.assistantText},
		{3, g.assistantEmpty},
		{14, g.assistantCalls},
		{6, g.assistantOpenAI},
		{2, g.system},
		{14, g.toolResult},
		{8, g.anthropicResults},
		{5, g.shellRun},
		{4, g.extension},
		{5, g.assistantExtension},
		{6, g.metadata},
		{2, g.compaction},
		{2, g.invalidCompaction},
		{2, g.nonMap},
		{3, g.repeat},
		{2, g.recall},
		{1, g.misplacedCall},
	}
	total := 0
	for _, s := range shapes {
		total += s.weight
	}
	n := g.r.IntN(total)
	for _, s := range shapes {
		if n < s.weight {
			v := s.make()
			if m, ok := v.(*record.Map); ok && g.rules.Convert(m) != nil {
				g.history = append(g.history, v)
			}
			return v
		}
		n -= s.weight
	}
	panic("unreachable")
}

// chance reports true with probability 1/n.
func (g *Gen) chance(n int) bool { return g.r.IntN(n) == 0 }

func pick[T any](g *Gen, xs ...T) T { return xs[g.r.IntN(len(xs))] }

// message builds a map from key, value pairs and gives it a timestamp in
// some form most of the time.
func (g *Gen) message(kv ...any) *record.Map {
	m := record.NewMap(kv...)
	if !g.chance(4) {
		m.Set("timestamp", g.timestamp())
	}
	if g.chance(150) {
		// Valid JSON, but beyond float64: the message has no msgpack form.
		m.Set("usage", record.NewMap("cost", record.Number(pick(g, "1E400", "-1e999"))))
	}
	return m
}

// timestamp returns a timestamp in any of the forms records carry: Unix
// milliseconds in every number representation, RFC 3339 strings with and
// without fractions and offsets, before 1970, and values that are not
// timestamps at all.
func (g *Gen) timestamp() any {
	switch g.r.IntN(6) {
	case 0:
		return int64(1764493200000 + g.r.IntN(1e6))
	case 1:
		return pick[any](g, 1764493200000.5, float64(1.7e12), record.Number("1.7E12"),
			record.Number("1764493200000.0"), uint64(1<<63), int64(-1))
	case 2, 3:
		return pick(g,
			"2025-11-30T09:00:05Z",
			"2025-11-30T09:00:05.123Z",
			"2025-11-30T09:00:05.123456789Z",
			"2025-11-30T09:00:05.9+05:30",
			"2025-11-30T09:00:05-08:00",
			"1969-12-31T23:59:59.999Z",
			"1960-01-01T00:00:00.5Z",
			"2024-02-29T12:00:00Z",
			"0001-01-01T00:00:00Z",
		)
	case 4:
		return pick(g,
			"2025-11-30T09:00:05",       // no offset
			"2025-11-30",                // a date only
			"2025-11-30 09:00:05Z",      // a space for T
			"2025-13-01T00:00:00Z",      // month 13
			"2023-02-29T00:00:00Z",      // not a leap year
			"2025-11-30t09:00:05z",      // lower case
			"2025-11-30T09:00:60Z",      // a leap second
			"2025-11-30T09:00:05.Z",     // a fraction without digits
			"2025-11-30T09:00:05+24:00", // an offset out of range
			"yesterday",
			"",
		)
	}
	return pick[any](g, nil, true, []any{}, record.NewMap("ms", int64(1)))
}

// text returns short prose, sometimes empty, blank or multi-line.
func (g *Gen) text() string {
	switch g.r.IntN(10) {
	case 0:
		return ""
	case 1:
		return pick(g, " ", "\n\t ", "\u00a0\u2003")
	case 2:
		return "line one\nline two\n"
	case 3:
		return "héllo wörld ✓ \"quoted\" \\ back"
	}
	return pick(g, "ok", "let me check", "done", "the build fails", "looks good", "running the tests") +
		fmt.Sprintf(" %d", g.r.IntN(100))
}

func (g *Gen) textBlock() *record.Map {
	return record.NewMap("type", "text", "text", g.text())
}

// imageBlock is an image: mostly an inline PNG, now and then one that
// some providers refuse (a type none takes, HEIC, which only Gemini takes,
// an image by URL, which Gemini does not take, or data that is not
// base64, which none takes). The shape comes from the one number drawn,
// so that adding shapes kept every other draw.
func (g *Gen) imageBlock() *record.Map {
	n := g.r.IntN(10000)
	switch n % 16 {
	case 0:
		return record.NewMap("type", "image", "data", fmt.Sprintf("Qk00%04d", n), "mimeType", "image/bmp")
	case 1:
		return record.NewMap("type", "image", "data", fmt.Sprintf("AAAA%04d", n), "mimeType", "image/heic")
	case 2:
		return record.NewMap("type", "image", "source", record.NewMap("type", "url", "url", fmt.Sprintf("https://example.com/%04d.png", n)))
	case 3:
		return record.NewMap("type", "image", "data", fmt.Sprintf("iVBOR%04d", n), "mimeType", "image/png")
	}
	return record.NewMap("type", "image", "data", fmt.Sprintf("iVBORw0K%04d", n), "mimeType", "image/png")
}

func (g *Gen) thinkingBlock() *record.Map {
	return record.NewMap("type", "thinking", "thinking", g.text(), "signature", "sig")
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

// callID returns the id a new call gets: mostly one of the small pool,
// sometimes one that collides with nothing, sometimes none at all.
func (g *Gen) callID() (any, bool) {
	switch n := g.r.IntN(20); {
	case n < 9:
		return pick(g, idPool...), true
	case n < 18:
		g.unique++
		return fmt.Sprintf("u%d", g.unique), true
	case n == 18:
		return "", true
	}
	return pick[any](g, nil, int64(7), []any{"c1"}), g.chance(2)
}

// resultID returns the id a result carries: usually a call's, recent or
// long past; sometimes a pool id that may not have been called (yet), an
// id nobody called, or none at all. tool is the answered call's tool, ""
// when the id answers no known call.
func (g *Gen) resultID() (id any, present bool, tool string) {
	switch n := g.r.IntN(20); {
	case n < 15 && len(g.calls) > 0:
		i := len(g.calls) - 1 - g.r.IntN(min(len(g.calls), 3))
		if g.chance(4) {
			i = g.r.IntN(len(g.calls)) // long after the call
		}
		return g.calls[i].id, true, g.calls[i].tool
	case n < 17:
		return pick(g, idPool...), true, ""
	case n == 17:
		return "nobody-called-this", true, ""
	case n == 18:
		return "", true, ""
	}
	return pick[any](g, nil, int64(42), false), g.chance(2), ""
}

// toolName returns a call's tool name, now and then one that is missing
// or not a string.
func (g *Gen) toolName() (any, bool) {
	switch g.r.IntN(20) {
	case 0:
		return nil, false
	case 1:
		return int64(3), true
	}
	return pick(g, toolNames...), true
}

func (g *Gen) remember(id any, tool any) {
	s, ok := id.(string)
	if !ok || s == "" {
		return
	}
	name, _ := tool.(string)
	g.calls = append(g.calls, genCall{id: s, tool: name})
}

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

// firstStringOf is the id a call block has per section 3.
func firstStringOf(b *record.Map) any {
	for _, k := range []string{"id", "toolCallId", "tool_call_id", "tool_call_id$"} {
		if s, ok := b.String(k); ok {
			return s
		}
	}
	return nil
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

// deepCopy copies a record value, so that a repeated record shares no
// memory with the original, as a redelivered record would not.
func deepCopy(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	case *record.Map:
		out := &record.Map{Members: make([]record.Member, len(x.Members))}
		for i, m := range x.Members {
			out.Members[i] = record.Member{Key: m.Key, Value: deepCopy(m.Value)}
		}
		return out
	}
	return v
}

// toolCallName is a tool_calls entry's tool name (CONTEXT.md section 5).
func toolCallName(e *record.Map) string {
	if f, ok := e.Get("function"); ok {
		if fm, ok := f.(*record.Map); ok {
			if n, ok := fm.String("name"); ok {
				return n
			}
		}
	}
	n, _ := e.String("name")
	return n
}
