// Package workload generates records shaped like agent transcripts, for
// the benchmarks, ctxd bench and the tests that need realistic sessions:
// mostly assistant turns with tool calls and their results, user text,
// OpenAI-style tool_calls, shell runs, extension messages and metadata
// rows, browser calls whose results hold screenshots, and compactions.
// Text records are around 500 bytes of JSON.
//
// A Generator is deterministic: the same seed and Profile give the same
// records, so that figures measured at different times are measured on
// the same sessions. Two profiles exist because the benchmarks that use
// them were measured with them: Default (ctxd bench, the integration
// tests) and Varied (pkg/projection's benchmarks). Changing what either
// generates changes the figures: TestGenerator_Unchanged pins the
// sessions of both, and pkg/projection's TestBenchmarkSessions_Unchanged
// the sessions its benchmarks render.
//
// The records of the property tests, which must cover every shape a
// record can take, hostile ones included, come from their own generators
// (pkg/projection, pkg/rebuild, pkg/store): these are realistic, not
// exhaustive.
package workload

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ctxd/ctxd/pkg/record"
)

// Mix weighs the kinds of turn Turn picks from, out of 100, in this
// order; what the weights leave is coding turns.
type Mix struct {
	User      int // a user message
	Coding    int // an assistant message with one or two tool calls, then their results
	OpenAI    int // an OpenAI-style tool_calls message and its tool message
	Anthropic int // a tool_use block answered by a tool_result block
	Answer    int // an assistant message that ends the turn
	Shell     int // a shell run
	Extension int // an extension's message
	Metadata  int // a row that is no message (model change, session info, ...)
	// Browser is a browser call and its result holding a screenshot of
	// ScreenshotBytes; a coding turn instead while ScreenshotBytes is 0.
	Browser int
}

// Profile says what a Generator makes.
type Profile struct {
	Mix Mix
	// AnswerText bounds the bytes of text of a final answer; zero: those
	// of any assistant message's text, 60 to 240.
	AnswerText [2]int
	// AllMetadata makes metadata rows of five kinds (model changes,
	// session info, labels, context rows, thinking levels); otherwise of
	// the first two.
	AllMetadata bool
	// PaddedCommands writes shell commands with white space around them,
	// which the context rules trim.
	PaddedCommands bool
	// ScreenshotBytes is the base64 length of a browser screenshot; 0:
	// none.
	ScreenshotBytes int
	// ScreenshotEvery places a browser turn every so many messages (or
	// records, in Records and Cycle), the first after half as many; 0:
	// only the Mix places them.
	ScreenshotEvery int
	// Screenshots is how many distinct screenshots are made up front and
	// used in turn (when ScreenshotEvery is set); 0: a new one for each
	// browser turn.
	Screenshots int
}

// WithScreenshots returns p with screenshots of the given base64 length
// every so many messages; 0 for either: none.
func (p Profile) WithScreenshots(bytes, every int) Profile {
	p.ScreenshotBytes, p.ScreenshotEvery = bytes, every
	return p
}

// Default is the profile of ctxd bench and the integration tests: 200 KiB
// screenshots every 100 messages, three distinct ones.
var Default = Profile{
	Mix:             Mix{User: 15, Coding: 52, OpenAI: 10, Answer: 13, Shell: 5, Extension: 3, Metadata: 2},
	ScreenshotBytes: 200 << 10,
	ScreenshotEvery: 100,
	Screenshots:     3,
}

// Varied is the profile of pkg/projection's benchmarks: the three ways of
// pairing a call with its result, longer final answers, every kind of
// metadata row, commands to trim, and browser turns in the mix with small
// images when ScreenshotBytes is set.
var Varied = Profile{
	Mix:            Mix{User: 14, Coding: 49, OpenAI: 8, Anthropic: 3, Answer: 14, Shell: 5, Extension: 3, Metadata: 2, Browser: 2},
	AnswerText:     [2]int{150, 500},
	AllMetadata:    true,
	PaddedCommands: true,
}

var vocabulary = strings.Fields(`
	the login button has no handler so clicking it does nothing wire it to
	handleSubmit and rerun tests file function returns an error when config
	path is missing check value before use update README add case for empty
	input server request reply stream consumer bucket message context session
	record decode encode compact snapshot summary failing passed build output
	src/login.tsx pkg/bus/consumer.go expected got line column nil pointer`)

var codingTools = []string{"read", "edit", "bash", "grep", "write"}

// Generator makes records deterministically. Ids and timestamps grow
// monotonically, so every call it makes has an id of its own.
type Generator struct {
	r   *rand.Rand
	p   Profile
	ids int
	ts  int64

	shots    []string // made up front, used in turn
	count    int      // messages (or records) counted towards the next screenshot
	nextShot int      // the count at which the next browser turn comes
}

// New returns a generator of the profile's records, seeded with seed.
func New(seed uint64, p Profile) *Generator {
	g := &Generator{r: rand.New(rand.NewPCG(seed, 0x5eed)), p: p, ts: 1764493200000}
	if p.Screenshots > 0 && p.ScreenshotBytes > 0 && p.ScreenshotEvery > 0 {
		for range p.Screenshots {
			g.shots = append(g.shots, g.screenshot(p.ScreenshotBytes))
		}
	}
	return g
}

func (g *Generator) chance(percent int) bool { return g.r.IntN(100) < percent }

// text returns words of the vocabulary, between min and max bytes long.
func (g *Generator) text(min, max int) string {
	n := min + g.r.IntN(max-min+1)
	var b strings.Builder
	b.Grow(n + 24)
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[g.r.IntN(len(vocabulary))])
	}
	return b.String()
}

func (g *Generator) now() int64 {
	g.ts += int64(200 + g.r.IntN(5000))
	return g.ts
}

func (g *Generator) rfc3339() string {
	return time.UnixMilli(g.now()).UTC().Format("2006-01-02T15:04:05.000Z")
}

func (g *Generator) id(prefix string) string {
	g.ids++
	return fmt.Sprintf("%s_%08d", prefix, g.ids)
}

func (g *Generator) path() string {
	return fmt.Sprintf("pkg/%s/%s.go", vocabulary[g.r.IntN(len(vocabulary))], vocabulary[g.r.IntN(len(vocabulary))])
}

func (g *Generator) screenshot(size int) string {
	raw := make([]byte, size*3/4)
	for i := range raw {
		raw[i] = byte(g.r.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)
}

func textBlock(text string) *record.Map { return record.NewMap("type", "text", "text", text) }

// User is a user message.
func (g *Generator) User() *record.Map {
	return record.NewMap(
		"role", "user",
		"content", []any{textBlock(g.text(150, 450))},
		"timestamp", g.now())
}

// assistant is an assistant message: some text, then blocks.
func (g *Generator) assistant(stop string, blocks ...any) *record.Map {
	content := append([]any{textBlock(g.text(60, 240))}, blocks...)
	return record.NewMap(
		"role", "assistant",
		"content", content,
		"provider", "anthropic",
		"model", "claude-sonnet-4-5",
		"usage", record.NewMap(
			"input", int64(8000+g.r.IntN(60000)),
			"output", int64(50+g.r.IntN(900)),
			"cacheRead", int64(g.r.IntN(50000))),
		"stopReason", stop,
		"timestamp", g.now())
}

// Answer is an assistant message that ends the turn.
func (g *Generator) Answer() *record.Map {
	m := g.assistant("stop")
	if t := g.p.AnswerText; t[1] > 0 {
		content, _ := m.Get("content")
		content.([]any)[0] = textBlock(g.text(t[0], t[1]))
	}
	return m
}

func (g *Generator) toolCall(id, name string) *record.Map {
	var args *record.Map
	switch name {
	case "edit":
		args = record.NewMap("path", g.path(), "oldText", g.text(20, 80), "newText", g.text(20, 100))
	case "bash":
		args = record.NewMap("command", "go test ./pkg/... -run "+g.text(5, 20))
	case "browser_use":
		args = record.NewMap("action", "click", "selector", "#login")
	default:
		args = record.NewMap("path", g.path())
	}
	return record.NewMap("type", "toolCall", "id", id, "name", name, "arguments", args)
}

func (g *Generator) toolResult(id, name string, content ...any) *record.Map {
	if content == nil {
		content = []any{textBlock(g.text(200, 600))}
	}
	return record.NewMap(
		"role", "toolResult",
		"toolCallId", id,
		"toolName", name,
		"content", content,
		"isError", false,
		"timestamp", g.now())
}

// codingTurn is an assistant message with one or two calls, then their
// results.
func (g *Generator) codingTurn() []any {
	n := 1
	if g.chance(20) {
		n = 2
	}
	ids := make([]string, n)
	names := make([]string, n)
	blocks := make([]any, n)
	for i := range n {
		ids[i], names[i] = g.id("toolu"), codingTools[g.r.IntN(len(codingTools))]
		blocks[i] = g.toolCall(ids[i], names[i])
	}
	out := []any{g.assistant("toolUse", blocks...)}
	for i := range n {
		out = append(out, g.toolResult(ids[i], names[i]))
	}
	return out
}

// CallPair is one call and its result.
func (g *Generator) CallPair() []any {
	id, name := g.id("toolu"), codingTools[g.r.IntN(len(codingTools))]
	return []any{g.assistant("toolUse", g.toolCall(id, name)), g.toolResult(id, name)}
}

func (g *Generator) openAITurn() []any {
	id := g.id("call")
	call := record.NewMap(
		"role", "assistant",
		"content", g.text(40, 160),
		"tool_calls", []any{record.NewMap(
			"id", id,
			"type", "function",
			"function", record.NewMap("name", "shell", "arguments", `{"cmd":"`+g.text(10, 60)+`"}`))},
		"timestamp", g.now())
	result := record.NewMap(
		"role", "tool",
		"tool_call_id", id,
		"content", g.text(150, 500),
		"timestamp", g.now())
	return []any{call, result}
}

// anthropicTurn is a tool_use block answered by a tool_result block in a
// user message.
func (g *Generator) anthropicTurn() []any {
	id := g.id("toolu")
	call := record.NewMap(
		"role", "assistant",
		"content", []any{
			textBlock(g.text(60, 200)),
			record.NewMap("type", "tool_use", "id", id, "name", "read", "input", record.NewMap("path", g.path()))},
		"timestamp", g.now())
	result := record.NewMap(
		"role", "user",
		"content", []any{record.NewMap(
			"type", "tool_result",
			"tool_use_id", id,
			"content", []any{textBlock(g.text(150, 450))})},
		"timestamp", g.now())
	return []any{call, result}
}

func (g *Generator) shellRun() any {
	command := "go test ./pkg/" + vocabulary[g.r.IntN(len(vocabulary))] + "/..."
	if g.p.PaddedCommands {
		command = "  " + command + "  "
	}
	return record.NewMap(
		"role", "bashExecution",
		"command", command,
		"output", g.text(100, 500)+"\n",
		"exitCode", int64(g.r.IntN(2)),
		"cancelled", false,
		"truncated", g.chance(10),
		"timestamp", g.rfc3339())
}

func (g *Generator) extension() any {
	return record.NewMap(
		"role", "custom",
		"customType", "todo",
		"content", g.text(100, 300),
		"display", g.chance(50),
		"details", record.NewMap("open", int64(3), "done", int64(5)),
		"timestamp", g.now())
}

func (g *Generator) metadata() any {
	if !g.p.AllMetadata {
		if g.chance(50) {
			return record.NewMap("type", "model_change", "provider", "anthropic", "modelId", "claude-sonnet-4-5", "timestamp", g.rfc3339())
		}
		return record.NewMap("type", "session_info", "name", g.text(10, 40), "timestamp", g.rfc3339())
	}
	switch g.r.IntN(5) {
	case 0:
		return record.NewMap("type", "model_change", "provider", "anthropic", "modelId", "claude-sonnet-4-5", "timestamp", g.rfc3339())
	case 1:
		return record.NewMap("type", "label", "targetId", g.id("entry"), "label", "before refactor", "timestamp", g.rfc3339())
	case 2:
		return record.NewMap("kind", "context", "cwd", "/home/dev/repo", "files", []any{g.path(), g.path()})
	case 3:
		return record.NewMap("type", "thinking_level_change", "thinkingLevel", "high", "timestamp", g.rfc3339())
	default:
		return record.NewMap("type", "session_info", "name", g.text(10, 40), "timestamp", g.rfc3339())
	}
}

// BrowserTurn is a browser call and its result holding a screenshot: one
// of those made up front, or a new one of ScreenshotBytes.
func (g *Generator) BrowserTurn() []any {
	id := g.id("toolu")
	var shot string
	if len(g.shots) > 0 {
		shot = g.shots[g.ids%len(g.shots)]
	} else {
		shot = g.screenshot(g.p.ScreenshotBytes)
	}
	image := record.NewMap("type", "image", "data", shot, "mimeType", "image/png")
	return []any{
		g.assistant("toolUse", g.toolCall(id, "browser_use")),
		g.toolResult(id, "browser_use", textBlock("Clicked #login; the page did not change"), image),
	}
}

// Turn returns the records of one turn, of a kind the Mix picks.
func (g *Generator) Turn() []any {
	m := g.p.Mix
	k := g.r.IntN(100)
	switch {
	case k < m.User:
		return []any{g.User()}
	case k < m.User+m.Coding:
		return g.codingTurn()
	case k < m.User+m.Coding+m.OpenAI:
		return g.openAITurn()
	case k < m.User+m.Coding+m.OpenAI+m.Anthropic:
		return g.anthropicTurn()
	case k < m.User+m.Coding+m.OpenAI+m.Anthropic+m.Answer:
		return []any{g.Answer()}
	case k < m.User+m.Coding+m.OpenAI+m.Anthropic+m.Answer+m.Shell:
		return []any{g.shellRun()}
	case k < m.User+m.Coding+m.OpenAI+m.Anthropic+m.Answer+m.Shell+m.Extension:
		return []any{g.extension()}
	case k < m.User+m.Coding+m.OpenAI+m.Anthropic+m.Answer+m.Shell+m.Extension+m.Metadata:
		return []any{g.metadata()}
	case k < m.User+m.Coding+m.OpenAI+m.Anthropic+m.Answer+m.Shell+m.Extension+m.Metadata+m.Browser && g.p.ScreenshotBytes > 0:
		return g.BrowserTurn()
	}
	return g.codingTurn()
}

// Compaction is a valid compaction whose snapshot is the given messages.
func (g *Generator) Compaction(snapshot []any) *record.Map {
	return record.NewMap(
		"type", "compaction",
		"at", g.rfc3339(),
		"baseSeq", int64(g.ids),
		"plannerVersion", int64(1),
		"summaryModelRef", "claude-haiku-4-5",
		"summary", g.text(400, 800),
		"qualityAudit", "passed",
		"messages", snapshot,
		"firstKeptIndex", int64(len(snapshot)),
		"tokensBefore", int64(150000),
		"tokensAfter", int64(12000))
}

// fill returns whole turns until the count reaches n, counting messages,
// or records when byRecords is set; a browser turn comes every
// ScreenshotEvery of them.
func (g *Generator) fill(n int, byRecords bool) []any {
	var out []any
	if g.nextShot == 0 {
		g.nextShot = g.p.ScreenshotEvery / 2
	}
	for g.count < n {
		var turn []any
		if g.p.ScreenshotBytes > 0 && g.p.ScreenshotEvery > 0 && g.count >= g.nextShot {
			turn = g.BrowserTurn()
			g.nextShot += g.p.ScreenshotEvery
		} else {
			turn = g.Turn()
		}
		for _, v := range turn {
			out = append(out, v)
			if byRecords || IsMessage(v) {
				g.count++
			}
		}
	}
	return out
}

// Session returns the records of a session holding n messages since its
// latest compaction: the compaction (a snapshot of three messages) first.
func (g *Generator) Session(n int) []any {
	snapshot := []any{g.User(), g.Answer(), g.User()}
	g.count = len(snapshot)
	return append([]any{g.Compaction(snapshot)}, g.fill(n, false)...)
}

// Next returns the records of the session's next turn holding a message
// (after any rows that are none), a browser turn when one is due: it
// continues Session.
func (g *Generator) Next() []any {
	return g.fill(g.count+1, false)
}

// Records returns n records of a session, no compaction; the last turn
// may be cut short.
func (g *Generator) Records(n int) []any {
	return g.fill(g.count+n, true)[:n]
}

// Cycle returns records that can be published over and over: period
// records, the last one a compaction, so that a session fed the cycle
// repeatedly stays bounded and never pairs across the seam.
func (g *Generator) Cycle(period int) []any {
	recs := g.fill(g.count+period-1, true)[:period-1]
	return append(recs, g.Compaction(Tail(recs, 8)))
}

// IsMessage reports whether a record the generator made becomes a message
// of the context (metadata rows and compactions do not).
func IsMessage(v any) bool {
	m, ok := v.(*record.Map)
	if !ok {
		return false
	}
	_, ok = m.Get("role")
	return ok
}

// Tail returns the last n records of recs that are messages, in order.
func Tail(recs []any, n int) []any {
	var out []any
	for i := len(recs) - 1; i >= 0 && len(out) < n; i-- {
		if IsMessage(recs[i]) {
			out = append(out, recs[i])
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Encode returns the JSON encoding of every record.
func Encode(recs []any) ([][]byte, error) {
	out := make([][]byte, len(recs))
	for i, r := range recs {
		b, err := record.MarshalJSON(r)
		if err != nil {
			return nil, fmt.Errorf("encode record %d: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}
