package projection_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// The benchmarks run on synthetic sessions shaped like real agent
// transcripts: mostly assistant turns with tool calls and their results,
// user text, some OpenAI-style tool_calls, occasional shell runs and
// extension messages, rare metadata rows, browser screenshots and
// compaction checkpoints. Values are built already decoded: decoding is
// benchmarked in pkg/record.
//
// Run them on one core, as a session is served by one goroutine:
//
//	go test ./pkg/projection -run '^$' -bench . -benchmem -cpu 1

const (
	// screenshotSize is the base64 length of a browser screenshot in the
	// rendered sessions.
	screenshotSize = 20 << 10
	// screenshotsPerSession are spread evenly over a rendered session.
	screenshotsPerSession = 5
	// applyPeriod is the number of records between two compactions in the
	// Apply workload, which keeps the session bounded as in production.
	applyPeriod = 4000
)

var renderSizes = []int{100, 1000, 10000}

var vocabulary = strings.Fields(`
	the login button has no handler so clicking it does nothing wire it to
	handleSubmit and rerun tests file function returns an error when config
	path is missing check value before use update README add case for empty
	input server request reply stream consumer bucket message context session
	record decode encode compact snapshot summary failing passed build output
	src/login.tsx pkg/bus/consumer.go expected got line column nil pointer`)

var codingTools = []string{"read", "edit", "bash", "grep", "write"}

// workload generates records deterministically. Ids and timestamps grow
// monotonically, so every call has a distinct id.
type workload struct {
	r     *rand.Rand
	ids   int
	ts    int64
	thumb int // base64 size of browser images in the random mix; 0: none
}

func newWorkload(seed uint64) *workload {
	return &workload{r: rand.New(rand.NewPCG(seed, 0x5eed)), ts: 1764493200000}
}

func (w *workload) chance(percent int) bool { return w.r.IntN(100) < percent }

// text returns words of the vocabulary, between min and max bytes long.
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

func (w *workload) screenshot(size int) string {
	raw := make([]byte, size*3/4)
	for i := range raw {
		raw[i] = byte(w.r.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)
}

func (w *workload) user() any {
	return record.NewMap(
		"role", "user",
		"content", []any{textBlock(w.text(150, 450))},
		"timestamp", w.now())
}

// assistant is an assistant message: some text, then blocks.
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
	m := w.assistant("stop")
	content, _ := m.Get("content")
	content.([]any)[0] = textBlock(w.text(150, 500))
	return m
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

// codingTurn is an assistant message with one or two calls, then their
// results.
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

// callPair is one call and its result: the Apply that pairs them changes
// the call's message, already rendered.
func (w *workload) callPair() []any {
	id, name := w.id("toolu"), codingTools[w.r.IntN(len(codingTools))]
	return []any{w.assistant("toolUse", w.toolCall(id, name)), w.toolResult(id, name)}
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
	result := record.NewMap(
		"role", "tool",
		"tool_call_id", id,
		"content", w.text(150, 500),
		"timestamp", w.now())
	return []any{call, result}
}

// anthropicTurn is a tool_use block answered by a tool_result block in a
// user message.
func (w *workload) anthropicTurn() []any {
	id := w.id("toolu")
	call := record.NewMap(
		"role", "assistant",
		"content", []any{
			textBlock(w.text(60, 200)),
			record.NewMap("type", "tool_use", "id", id, "name", "read", "input", record.NewMap("path", w.path()))},
		"timestamp", w.now())
	result := record.NewMap(
		"role", "user",
		"content", []any{record.NewMap(
			"type", "tool_result",
			"tool_use_id", id,
			"content", []any{textBlock(w.text(150, 450))})},
		"timestamp", w.now())
	return []any{call, result}
}

func (w *workload) shellRun() any {
	return record.NewMap(
		"role", "bashExecution",
		"command", "  go test ./pkg/"+vocabulary[w.r.IntN(len(vocabulary))]+"/...  ",
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
	switch w.r.IntN(5) {
	case 0:
		return record.NewMap("type", "model_change", "provider", "anthropic", "modelId", "claude-sonnet-4-5", "timestamp", w.rfc3339())
	case 1:
		return record.NewMap("type", "label", "targetId", w.id("entry"), "label", "before refactor", "timestamp", w.rfc3339())
	case 2:
		return record.NewMap("kind", "context", "cwd", "/home/dev/repo", "files", []any{w.path(), w.path()})
	case 3:
		return record.NewMap("type", "thinking_level_change", "thinkingLevel", "high", "timestamp", w.rfc3339())
	default:
		return record.NewMap("type", "session_info", "name", w.text(10, 40), "timestamp", w.rfc3339())
	}
}

// browserTurn is a browser call and its result holding a screenshot of
// the given base64 size.
func (w *workload) browserTurn(size int) []any {
	id := w.id("toolu")
	image := record.NewMap("type", "image", "data", w.screenshot(size), "mimeType", "image/png")
	return []any{
		w.assistant("toolUse", w.toolCall(id, "browser_use")),
		w.toolResult(id, "browser_use", textBlock("Clicked #login; the page did not change"), image),
	}
}

// turn returns the records of one randomly chosen turn.
func (w *workload) turn() []any {
	k := w.r.IntN(100)
	switch {
	case k < 14:
		return []any{w.user()}
	case k < 63:
		return w.codingTurn()
	case k < 71:
		return w.openAITurn()
	case k < 74:
		return w.anthropicTurn()
	case k < 88:
		return []any{w.answer()}
	case k < 93:
		return []any{w.shellRun()}
	case k < 96:
		return []any{w.extension()}
	case k < 98:
		return []any{w.metadata()}
	case w.thumb > 0:
		return w.browserTurn(w.thumb)
	}
	return w.codingTurn()
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

// tailMessages returns the last n message records of recs.
func tailMessages(recs []any, n int) []any {
	var out []any
	for i := len(recs) - 1; i >= 0 && len(out) < n; i-- {
		if projection.Convert(recs[i]) != nil {
			out = append(out, recs[i])
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

func jsonSize(tb testing.TB, values ...any) int {
	tb.Helper()
	n := 0
	for _, v := range values {
		b, err := record.MarshalJSON(v)
		if err != nil {
			tb.Fatal(err)
		}
		n += len(b)
	}
	return n
}

// applyWorkload returns records that cycle cleanly (the last one is a
// compaction, so replaying from the start never pairs across the seam)
// and their average JSON size. Browser images are small here: Apply never
// reads image data, and the records stay around 500 bytes.
func applyWorkload(b *testing.B) ([]any, float64) {
	w := newWorkload(1)
	w.thumb = 512
	var pool []any
	for range 4 {
		start := len(pool)
		for len(pool)-start < applyPeriod-1 {
			pool = append(pool, w.turn()...)
		}
		pool = append(pool, w.compaction(tailMessages(pool[start:], 8)))
	}
	return pool, float64(jsonSize(b, pool...)) / float64(len(pool))
}

func BenchmarkSession_Apply(b *testing.B) {
	pool, avg := applyWorkload(b)
	s := projection.New(projection.Options{})
	var seq uint64
	i := 0
	b.SetBytes(int64(avg))
	b.ReportAllocs()
	for b.Loop() {
		seq++
		s.Apply(seq, pool[i])
		if i++; i == len(pool) {
			i = 0
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(avg, "B/record")
}

// renderSession is a session of n pass-1 messages since its checkpoint,
// with screenshotsPerSession browser screenshots spread evenly, and the
// workload that made it, to continue it.
func renderSession(n int) ([]any, *workload) {
	w := newWorkload(uint64(n))
	snapshot := []any{w.user(), w.answer(), w.user()}
	recs := []any{w.compaction(snapshot)}
	msgs := len(snapshot)
	every := n / (screenshotsPerSession + 1)
	next := every
	for msgs < n {
		var turn []any
		if msgs >= next {
			turn, next = w.browserTurn(screenshotSize), next+every
		} else {
			turn = w.turn()
		}
		for _, v := range turn {
			recs = append(recs, v)
			if projection.Convert(v) != nil {
				msgs++
			}
		}
	}
	return recs, w
}

// appends continues a session with k records: calls, each followed by its
// result, and every eighth call a browser call whose screenshot trims the
// one before it.
func (w *workload) appends(k int) []any {
	var out []any
	for j := 0; len(out) < k; j++ {
		if j%8 == 7 {
			out = append(out, w.browserTurn(screenshotSize)...)
		} else {
			out = append(out, w.callPair()...)
		}
	}
	return out[:k]
}

// renderFormat is one encoding of the context: the session's cached
// rendering and the plain encoding of a message list it must equal.
type renderFormat struct {
	name   string
	body   func(s *projection.Session) []byte
	reply  func(s *projection.Session) []byte // the whole array
	encode func(dst []byte, msgs []any) ([]byte, error)
}

var renderFormats = []renderFormat{
	{
		name: "json",
		body: func(s *projection.Session) []byte {
			b, _ := s.JSONBody()
			return b
		},
		reply:  func(s *projection.Session) []byte { return s.AppendJSON(nil) },
		encode: func(dst []byte, msgs []any) ([]byte, error) { return record.AppendJSON(dst, msgs) },
	},
	{
		name: "msgpack",
		body: func(s *projection.Session) []byte {
			b, _, _ := s.MsgpackBody()
			return b
		},
		reply:  func(s *projection.Session) []byte { return s.AppendMsgpack(nil) },
		encode: func(dst []byte, msgs []any) ([]byte, error) { return record.AppendMsgpack(dst, msgs) },
	},
}

func newSession(recs []any) *projection.Session {
	s := projection.New(projection.Options{})
	for i, v := range recs {
		s.Apply(uint64(i+1), v)
	}
	return s
}

// appendsPerRebuild bounds how far after-append grows a session before it
// starts again from the n-message state.
func appendsPerRebuild(n int) int { return min(64, max(16, n/10)) }

// BenchmarkSession_Render measures serving a session's context:
//
//   - cached: the body when nothing changed, which must cost the same at
//     every size;
//   - after-append: Apply one record (a call, then its result, which
//     changes the call's message; some results carry a screenshot, which
//     trims the previous one), then render the body. MB/s counts the body
//     served. It also reports encode-ns/op, the cost of encoding the whole
//     reply measured interleaved on the same session, and x-encode, the
//     ratio of the two;
//   - encode-reply: the baseline, encoding Build's messages from scratch.
func BenchmarkSession_Render(b *testing.B) {
	for _, n := range renderSizes {
		recs, w := renderSession(n)
		tail := w.appends(appendsPerRebuild(n))
		msgs := projection.Build(projection.Numbered(recs), projection.Options{}).Messages
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for _, f := range renderFormats {
				b.Run(f.name, func(b *testing.B) {
					checkBody(b, f, newSession(recs), recs)
					b.Run("cached", func(b *testing.B) { benchCached(b, f, recs) })
					b.Run("after-append", func(b *testing.B) { benchAfterAppend(b, f, recs, tail) })
					b.Run("encode-reply", func(b *testing.B) { benchEncodeReply(b, f, msgs) })
				})
			}
		})
	}
}

// checkBody makes sure the session renders what encoding Build's
// messages gives: a fast wrong answer is not worth measuring.
func checkBody(b *testing.B, f renderFormat, s *projection.Session, recs []any) {
	b.Helper()
	whole, err := f.encode(nil, projection.Build(projection.Numbered(recs), projection.Options{}).Messages)
	if err != nil {
		b.Fatal(err)
	}
	if got := f.reply(s); !bytes.Equal(got, whole) {
		b.Fatalf("%s rendering differs from encoding Build's messages (%d bytes, want %d)", f.name, len(got), len(whole))
	}
}

func benchCached(b *testing.B, f renderFormat, recs []any) {
	s := newSession(recs)
	f.body(s)
	var body []byte
	b.ReportAllocs()
	for b.Loop() {
		body = f.body(s)
	}
	b.ReportMetric(float64(len(body)), "body-B")
}

func benchAfterAppend(b *testing.B, f renderFormat, recs, tail []any) {
	var (
		s       *projection.Session
		seq     uint64
		next    int
		enc     []byte
		encTime time.Duration
		encRuns int
		bodyB   int
	)
	rebuild := func() {
		s = newSession(recs)
		f.body(s)
		seq, next = uint64(len(recs)), 0
	}
	rebuild()
	b.ReportAllocs()
	for b.Loop() {
		if next == len(tail) {
			b.StopTimer()
			rebuild()
			b.StartTimer()
		}
		seq++
		s.Apply(seq, tail[next])
		next++
		body := f.body(s)
		bodyB += len(body)
		// Sample the baseline every third append, so that it sees calls
		// and results alike.
		if next%3 == 0 {
			b.StopTimer()
			msgs := s.Messages()
			start := time.Now()
			var err error
			if enc, err = f.encode(enc[:0], msgs); err != nil {
				b.Fatal(err)
			}
			encTime += time.Since(start)
			encRuns++
			b.StartTimer()
		}
	}
	// The session must still answer what Build does over the same records.
	checkBody(b, f, s, append(append([]any(nil), recs...), tail[:next]...))
	b.SetBytes(int64(bodyB / b.N))
	if encRuns > 0 {
		op := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		encNs := float64(encTime.Nanoseconds()) / float64(encRuns)
		b.ReportMetric(encNs, "encode-ns/op")
		b.ReportMetric(op/encNs, "x-encode")
	}
}

func benchEncodeReply(b *testing.B, f renderFormat, msgs []any) {
	out, err := f.encode(nil, msgs)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, len(out))
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = f.encode(buf[:0], msgs)
	}
}

// BenchmarkBuild is the rebuild-per-request baseline: the batch passes
// over the whole session, then encoding the reply.
func BenchmarkBuild(b *testing.B) {
	for _, n := range renderSizes {
		recs, _ := renderSession(n)
		numbered := projection.Numbered(recs)
		size := jsonSize(b, recs...)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.Run("build", func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					projection.Build(numbered, projection.Options{})
				}
				b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
			})
			b.Run("build+json", func(b *testing.B) {
				var buf []byte
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					res := projection.Build(numbered, projection.Options{})
					buf, _ = record.AppendJSON(buf[:0], res.Messages)
				}
				b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "records/s")
			})
		})
	}
}
