package perf

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// The records are shaped like real agent transcripts: mostly assistant
// turns with tool calls and their results, user text, OpenAI-style
// tool_calls, shell runs, extension messages and metadata rows, with a
// browser call whose result holds a screenshot every so many messages.
// Text records are around 500 bytes of JSON.

var vocabulary = strings.Fields(`
	the login button has no handler so clicking it does nothing wire it to
	handleSubmit and rerun tests file function returns an error when config
	path is missing check value before use update README add case for empty
	input server request reply stream consumer bucket message context session
	record decode encode compact snapshot summary failing passed build output
	src/login.tsx pkg/bus/consumer.go expected got line column nil pointer`)

var codingTools = []string{"read", "edit", "bash", "grep", "write"}

// workload generates records deterministically.
type workload struct {
	r   *rand.Rand
	ids int
	ts  int64

	shotBytes int      // base64 length of a screenshot; 0: none
	shotEvery int      // messages between two screenshots
	shots     []string // a few distinct screenshots, used in turn
	nextShot  int
}

func newWorkload(seed uint64, shotBytes, shotEvery int) *workload {
	w := &workload{r: rand.New(rand.NewPCG(seed, 0x5eed)), ts: 1764493200000, shotBytes: shotBytes, shotEvery: shotEvery}
	if shotBytes > 0 && shotEvery > 0 {
		for range 3 {
			raw := make([]byte, shotBytes*3/4)
			for i := range raw {
				raw[i] = byte(w.r.Uint32())
			}
			w.shots = append(w.shots, base64.StdEncoding.EncodeToString(raw))
		}
	}
	return w
}

func (w *workload) chance(percent int) bool { return w.r.IntN(100) < percent }

func (w *workload) text(min, max int) string {
	n := min + w.r.IntN(max-min+1)
	var b strings.Builder
	b.Grow(n + 24)
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[w.r.IntN(len(vocabulary))])
	}
	return b.String()
}

func (w *workload) now() int64 {
	w.ts += int64(200 + w.r.IntN(5000))
	return w.ts
}

func (w *workload) rfc3339() string {
	return time.UnixMilli(w.now()).UTC().Format("2006-01-02T15:04:05.000Z")
}

func (w *workload) id(prefix string) string {
	w.ids++
	return fmt.Sprintf("%s_%08d", prefix, w.ids)
}

func (w *workload) path() string {
	return fmt.Sprintf("pkg/%s/%s.go", vocabulary[w.r.IntN(len(vocabulary))], vocabulary[w.r.IntN(len(vocabulary))])
}

func textBlock(text string) *record.Map { return record.NewMap("type", "text", "text", text) }

func (w *workload) user() any {
	return record.NewMap("role", "user", "content", []any{textBlock(w.text(150, 450))}, "timestamp", w.now())
}

func (w *workload) assistant(stop string, blocks ...any) *record.Map {
	content := append([]any{textBlock(w.text(60, 240))}, blocks...)
	return record.NewMap(
		"role", "assistant",
		"content", content,
		"provider", "anthropic",
		"model", "claude-sonnet-4-5",
		"usage", record.NewMap(
			"input", int64(8000+w.r.IntN(60000)),
			"output", int64(50+w.r.IntN(900)),
			"cacheRead", int64(w.r.IntN(50000))),
		"stopReason", stop,
		"timestamp", w.now())
}

func (w *workload) answer() any {
	return w.assistant("stop")
}

func (w *workload) toolCall(id, name string) *record.Map {
	var args *record.Map
	switch name {
	case "edit":
		args = record.NewMap("path", w.path(), "oldText", w.text(20, 80), "newText", w.text(20, 100))
	case "bash":
		args = record.NewMap("command", "go test ./pkg/... -run "+w.text(5, 20))
	case "browser_use":
		args = record.NewMap("action", "click", "selector", "#login")
	default:
		args = record.NewMap("path", w.path())
	}
	return record.NewMap("type", "toolCall", "id", id, "name", name, "arguments", args)
}

func (w *workload) toolResult(id, name string, content ...any) *record.Map {
	if content == nil {
		content = []any{textBlock(w.text(200, 600))}
	}
	return record.NewMap(
		"role", "toolResult",
		"toolCallId", id,
		"toolName", name,
		"content", content,
		"isError", false,
		"timestamp", w.now())
}

func (w *workload) codingTurn() []any {
	n := 1
	if w.chance(20) {
		n = 2
	}
	ids := make([]string, n)
	names := make([]string, n)
	blocks := make([]any, n)
	for i := range n {
		ids[i], names[i] = w.id("toolu"), codingTools[w.r.IntN(len(codingTools))]
		blocks[i] = w.toolCall(ids[i], names[i])
	}
	out := []any{w.assistant("toolUse", blocks...)}
	for i := range n {
		out = append(out, w.toolResult(ids[i], names[i]))
	}
	return out
}

func (w *workload) openAITurn() []any {
	id := w.id("call")
	call := record.NewMap(
		"role", "assistant",
		"content", w.text(40, 160),
		"tool_calls", []any{record.NewMap(
			"id", id,
			"type", "function",
			"function", record.NewMap("name", "shell", "arguments", `{"cmd":"`+w.text(10, 60)+`"}`))},
		"timestamp", w.now())
	result := record.NewMap("role", "tool", "tool_call_id", id, "content", w.text(150, 500), "timestamp", w.now())
	return []any{call, result}
}

func (w *workload) shellRun() any {
	return record.NewMap(
		"role", "bashExecution",
		"command", "go test ./pkg/"+vocabulary[w.r.IntN(len(vocabulary))]+"/...",
		"output", w.text(100, 500)+"\n",
		"exitCode", int64(w.r.IntN(2)),
		"cancelled", false,
		"truncated", w.chance(10),
		"timestamp", w.rfc3339())
}

func (w *workload) extension() any {
	return record.NewMap(
		"role", "custom",
		"customType", "todo",
		"content", w.text(100, 300),
		"display", w.chance(50),
		"details", record.NewMap("open", int64(3), "done", int64(5)),
		"timestamp", w.now())
}

func (w *workload) metadata() any {
	if w.chance(50) {
		return record.NewMap("type", "model_change", "provider", "anthropic", "modelId", "claude-sonnet-4-5", "timestamp", w.rfc3339())
	}
	return record.NewMap("type", "session_info", "name", w.text(10, 40), "timestamp", w.rfc3339())
}

// browserTurn is a browser call and its result holding a screenshot.
func (w *workload) browserTurn() []any {
	id := w.id("toolu")
	shot := w.shots[w.ids%len(w.shots)]
	image := record.NewMap("type", "image", "data", shot, "mimeType", "image/png")
	return []any{
		w.assistant("toolUse", w.toolCall(id, "browser_use")),
		w.toolResult(id, "browser_use", textBlock("Clicked #login; the page did not change"), image),
	}
}

// turn returns the records of one randomly chosen turn.
func (w *workload) turn() []any {
	k := w.r.IntN(100)
	switch {
	case k < 15:
		return []any{w.user()}
	case k < 67:
		return w.codingTurn()
	case k < 77:
		return w.openAITurn()
	case k < 90:
		return []any{w.answer()}
	case k < 95:
		return []any{w.shellRun()}
	case k < 98:
		return []any{w.extension()}
	}
	return []any{w.metadata()}
}

// compaction is a valid checkpoint whose snapshot is the given messages.
func (w *workload) compaction(snapshot []any) *record.Map {
	return record.NewMap(
		"type", "compaction",
		"at", w.rfc3339(),
		"baseSeq", int64(w.ids),
		"plannerVersion", int64(1),
		"summaryModelRef", "claude-haiku-4-5",
		"summary", w.text(400, 800),
		"qualityAudit", "passed",
		"messages", snapshot,
		"firstKeptIndex", int64(len(snapshot)),
		"tokensBefore", int64(150000),
		"tokensAfter", int64(12000))
}

// records returns at least n records; it counts pass-1 messages, or
// records when byRecords is set. A browser turn comes every shotEvery
// messages (or records).
func (w *workload) records(n int, byRecords bool, start int) []any {
	var out []any
	count := start
	if w.nextShot == 0 {
		w.nextShot = w.shotEvery / 2
	}
	for count < n {
		var turn []any
		if len(w.shots) > 0 && count >= w.nextShot {
			turn = w.browserTurn()
			w.nextShot += w.shotEvery
		} else {
			turn = w.turn()
		}
		for _, v := range turn {
			out = append(out, v)
			if byRecords || projection.Convert(v) != nil {
				count++
			}
		}
	}
	return out
}

// sessionSince returns the records of a session holding n messages since
// its latest compaction: the compaction (a snapshot of three messages)
// first.
func (w *workload) sessionSince(n int) []any {
	snapshot := []any{w.user(), w.answer(), w.user()}
	return append([]any{w.compaction(snapshot)}, w.records(n, false, len(snapshot))...)
}

// sessionRecords returns exactly n records of a session, no compaction.
func (w *workload) sessionRecords(n int) []any {
	return w.records(n, true, 0)[:n]
}

// cycle returns records that can be published over and over: period
// records, the last one a compaction, so that a session fed the cycle
// repeatedly stays bounded and never pairs across the seam.
func (w *workload) cycle(period int) []any {
	recs := w.records(period-1, true, 0)[:period-1]
	var tail []any
	for i := len(recs) - 1; i >= 0 && len(tail) < 8; i-- {
		if projection.Convert(recs[i]) != nil {
			tail = append([]any{recs[i]}, tail...)
		}
	}
	return append(recs, w.compaction(tail))
}

// encode returns the JSON encoding of every record.
func encode(recs []any) ([][]byte, error) {
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
