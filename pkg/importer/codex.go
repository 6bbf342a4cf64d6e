package importer

import (
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// Codex writes one {timestamp, type, payload} envelope a line. The model's
// history is the response_item lines; event_msg lines duplicate them for
// the UI or carry telemetry, except thread_rolled_back, which drops the
// last user turns. A compacted line replaces the history. Very old builds
// wrote the items bare, without the envelope.

// codexSummaryPrefix is what Codex puts before a compaction summary when it
// rebuilds the history itself (codex-rs templates/compact/summary_prefix.md).
const codexSummaryPrefix = "Another language model started to solve this problem and produced a summary of its thinking process. You also have access to the state of the tools that were used by that language model. Use this to build on the work that has already been done and avoid duplicating work. Here is the summary produced by the other language model, use the information in this summary to  assist with your own analysis:"

// codexLegacyUserChars is the budget of recent user messages a legacy
// compaction keeps: Codex's 20,000 tokens at four characters a token.
const codexLegacyUserChars = 80000

// codexItemTypes are the response item types a bare (old) line may have.
var codexItemTypes = map[string]bool{
	"message": true, "function_call": true, "function_call_output": true, "reasoning": true,
	"custom_tool_call": true, "custom_tool_call_output": true, "local_shell_call": true,
	"web_search_call": true,
}

type codexRec struct {
	id, where string
	v         *record.Map
	raw       []byte
}

type codexParser struct {
	rep  *Report
	sid  string
	recs []codexRec
	// Turn starts, as indexes in recs: from the user_message events when
	// the file has them, else from the user messages.
	byEvent, byItem []int
	pendingUser     int
	lastTokens      int64
	sawMeta         bool
}

func parseCodex(name string, data []byte) ([]*Transcript, error) {
	type line struct {
		n int
		m *record.Map
	}
	var lines []line
	var rep Report
	if err := eachDecoded(data, &rep, nil, func(n int, _ []byte, m *record.Map, _ kept) {
		lines = append(lines, line{n, m})
	}); err != nil {
		return nil, err
	}
	p := &codexParser{rep: &rep, pendingUser: -1}
	for _, l := range lines {
		if meta := codexMeta(l.m); meta != nil {
			p.sid = str(meta, "id")
			break
		}
	}
	source := p.sid
	if source == "" {
		source = baseName(name)
	}
	understood := 0
	for _, l := range lines {
		if p.line(source, l.n, l.m) {
			understood++
		}
	}
	if understood == 0 {
		return nil, noneUnderstood(&rep, Codex)
	}
	b := newBuilder(p.sid, SessionID(source))
	b.t.Report = rep
	for _, r := range p.recs {
		if r.v == nil {
			b.addRecord(Record{ID: r.id, Where: r.where, class: "compaction", raw: r.raw})
			continue
		}
		b.addRaw(r.id, r.where, r.v, r.raw)
	}
	return []*Transcript{b.t}, nil
}

// codexMeta returns the session meta of a line, enveloped or bare.
func codexMeta(m *record.Map) *record.Map {
	if str(m, "type") == "session_meta" {
		return mapAt(m, "payload")
	}
	if !has(m, "type") && !has(m, "payload") && has(m, "id") && has(m, "timestamp") {
		return m
	}
	return nil
}

func (p *codexParser) emit(id, where string, v *record.Map) {
	p.recs = append(p.recs, codexRec{id, where, v, nil})
}

// line handles one line and reports whether it was understood.
func (p *codexParser) line(source string, n int, m *record.Map) bool {
	where := lineWhere(n)
	id := fmt.Sprintf("%s:%d", source, n)
	typ, payload, ts := str(m, "type"), mapAt(m, "payload"), get(m, "timestamp")
	if !has(m, "payload") {
		if meta := codexMeta(m); meta != nil {
			typ, payload = "session_meta", meta
		} else if codexItemTypes[typ] {
			typ, payload = "response_item", m
		}
	}
	switch typ {
	case "session_meta":
		if p.sawMeta {
			p.rep.metadata("session_meta (another)")
			return true
		}
		p.sawMeta = true
		p.rep.metadata("session_meta")
		// The instructions the session started with are the system prompt.
		text := str(payload, "instructions")
		if text == "" {
			if bi := mapAt(payload, "base_instructions"); bi != nil {
				text = str(bi, "text")
			} else {
				text = str(payload, "base_instructions")
			}
		}
		if text != "" {
			p.emit(id, where, record.NewMap("role", "system", "content", []any{textBlock(text)}, "timestamp", ts))
		}
	case "response_item":
		unknown := len(p.rep.Unknown)
		for i, v := range p.item(where, payload, ts) {
			if i > 0 {
				id = fmt.Sprintf("%s:%d.%d", source, n, i+1)
			}
			if r, _ := v.String("role"); r == "user" {
				p.userItem(v)
			}
			p.emit(id, where, v)
		}
		return len(p.rep.Unknown) == unknown
	case "compacted":
		p.compacted(id, where, payload, ts)
	case "event_msg":
		et := str(payload, "type")
		p.rep.metadata("event_msg/" + et)
		switch et {
		case "user_message":
			if p.pendingUser >= 0 {
				p.byEvent = append(p.byEvent, p.pendingUser)
			} else {
				p.byEvent = append(p.byEvent, len(p.recs))
			}
			p.pendingUser = -1
		case "token_count":
			if t, ok := intAt(mapAt(mapAt(payload, "info"), "last_token_usage"), "total_tokens"); ok {
				p.lastTokens = t
			}
		case "thread_rolled_back":
			turns, _ := intAt(payload, "num_turns")
			p.rollback(where, int(turns))
		}
	case "turn_context", "world_state", "inter_agent_communication", "inter_agent_communication_metadata":
		p.rep.metadata(typ)
	default:
		p.rep.unknown(where, "type %q", typ)
		return false
	}
	return true
}

// userItem notes a user message as a possible turn start.
func (p *codexParser) userItem(v *record.Map) {
	p.pendingUser = len(p.recs)
	text := contentText(get(v, "content"))
	if !strings.HasPrefix(text, "<environment_context>") && !strings.HasPrefix(text, "<user_instructions>") {
		p.byItem = append(p.byItem, len(p.recs))
	}
}

// rollback drops the last turns, as Codex does when it replays the file.
func (p *codexParser) rollback(where string, turns int) {
	starts := p.byEvent
	if len(starts) == 0 {
		starts = p.byItem
	}
	if turns <= 0 {
		return
	}
	cut := 0
	if turns <= len(starts) {
		cut = starts[len(starts)-turns]
	}
	for _, r := range p.recs[cut:] {
		if classOf(r.v) != "metadata" {
			p.rep.Abandoned++
		}
	}
	p.recs = p.recs[:cut]
	p.byEvent = truncateStarts(p.byEvent, cut)
	p.byItem = truncateStarts(p.byItem, cut)
	p.pendingUser = -1
}

func truncateStarts(s []int, cut int) []int {
	for len(s) > 0 && s[len(s)-1] >= cut {
		s = s[:len(s)-1]
	}
	return s
}

// item converts one response item into the records it gives (none, one,
// or in rare cases more).
func (p *codexParser) item(where string, it *record.Map, ts any) []*record.Map {
	typ := str(it, "type")
	msg := func(kv ...any) *record.Map {
		m := record.NewMap(kv...)
		setIf(m, "timestamp", ts)
		return m
	}
	call := func(callType string, body *record.Map, extra ...any) []*record.Map {
		entry := record.NewMap()
		if id, ok := it.Get("call_id"); ok {
			entry.Set("id", id)
		}
		entry.Set("type", callType)
		entry.Set(callType, body)
		for i := 0; i+1 < len(extra); i += 2 {
			entry.Set(extra[i].(string), extra[i+1])
		}
		return []*record.Map{msg("role", "assistant", "tool_calls", []any{entry})}
	}
	switch typ {
	case "message":
		role := str(it, "role")
		switch role {
		case "user", "assistant", "system":
		case "developer":
			role = "system" // ctxd drops a developer message; the model read it
		default:
			p.rep.unknown(where, "a message with role %q", role)
			return nil
		}
		return []*record.Map{msg("role", role, "content", p.blocks(where, get(it, "content")))}
	case "function_call":
		fn := record.NewMap("name", get(it, "name"), "arguments", argumentsText(get(it, "arguments")))
		if ns, ok := it.String("namespace"); ok {
			fn.Set("namespace", ns)
		}
		return call("function", fn)
	case "custom_tool_call":
		return call("custom", record.NewMap("name", get(it, "name"), "input", get(it, "input")))
	case "local_shell_call":
		if !has(it, "call_id") {
			it = with(it, "call_id", get(it, "id"))
		}
		return call("function", record.NewMap("name", "local_shell", "arguments", jsonText(get(it, "action"))))
	case "tool_search_call":
		return call("function", record.NewMap("name", "tool_search", "arguments", jsonText(get(it, "arguments"))))
	case "web_search_call", "image_generation_call":
		// The provider ran these tools; no output item ever follows.
		name, args := "web_search", get(it, "action")
		if typ == "image_generation_call" {
			name, args = "image_generation", record.NewMap("revised_prompt", get(it, "revised_prompt"))
		}
		entry := record.NewMap()
		setIf(entry, "id", get(it, "id"))
		entry.Set("type", "function")
		entry.Set("function", record.NewMap("name", name, "arguments", jsonText(args)))
		entry.Set("providerExecuted", true)
		out := msg("role", "assistant", "tool_calls", []any{entry})
		if img, ok := it.String("result"); ok && img != "" {
			out.Set("content", []any{record.NewMap("type", "image", "data", img, "mimeType", "image/png")})
		}
		return []*record.Map{out}
	case "function_call_output", "custom_tool_call_output", "tool_search_output":
		var content any
		if typ == "tool_search_output" {
			content = jsonText(get(it, "tools"))
		} else {
			content = p.output(where, get(it, "output"))
		}
		return []*record.Map{msg("role", "tool", "tool_call_id", get(it, "call_id"), "content", content)}
	case "agent_message":
		// A message from another agent, read by this one.
		m := msg("role", "custom", "customType", "codex/agent_message", "content", p.blocks(where, get(it, "content")))
		m.Set("details", record.NewMap("author", get(it, "author"), "recipient", get(it, "recipient")))
		return []*record.Map{m}
	case "reasoning":
		// Encrypted reasoning replays only to OpenAI; its summary is UI.
		p.rep.metadata("response_item/reasoning")
	case "ghost_snapshot", "context_compaction", "compaction_trigger", "additional_tools":
		p.rep.metadata("response_item/" + typ)
	case "compaction", "compaction_summary":
		p.rep.approx(where, "an encrypted compaction item, readable only by OpenAI: left out (the history before it stays in the context)")
	default:
		p.rep.unknown(where, "response item type %q", typ)
	}
	return nil
}

// argumentsText keeps a call's arguments string; any other value is
// encoded as JSON text, the shape OpenAI's tool_calls hold.
func argumentsText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return jsonText(v)
}

// blocks converts message content: text items become text blocks, image
// data URLs image blocks.
func (p *codexParser) blocks(where string, v any) any {
	arr, ok := v.([]any)
	if !ok {
		return v
	}
	out := make([]any, 0, len(arr))
	for _, e := range arr {
		bm, ok := e.(*record.Map)
		if !ok {
			out = append(out, e)
			continue
		}
		switch str(bm, "type") {
		case "input_text", "output_text", "text":
			out = append(out, textBlock(str(bm, "text")))
		case "input_image":
			if img, ok := imageFromDataURL(str(bm, "image_url")); ok {
				out = append(out, img)
			} else {
				p.rep.approx(where, "an input_image without image data (a URL or none): kept as it was, not as an image block")
				out = append(out, bm)
			}
		case "encrypted_content":
			p.rep.approx(where, "encrypted content in a message: left out")
		default:
			out = append(out, bm)
		}
	}
	return out
}

// output converts a tool output: a string, an array of content items, or
// an old {content, success} map.
func (p *codexParser) output(where string, v any) any {
	switch o := v.(type) {
	case string, []any:
		return p.blocks(where, o)
	case *record.Map:
		if c, ok := o.Get("content"); ok {
			return p.blocks(where, c)
		}
		if has(o, "type") {
			return p.blocks(where, []any{o})
		}
	}
	return jsonText(v)
}

// compacted turns a compacted line into a compaction: its replacement
// history when it has one, else the history Codex itself rebuilds (the
// initial context, recent user messages, the summary), which is only an
// approximation of what the session saw.
func (p *codexParser) compacted(id, where string, payload *record.Map, ts any) {
	summary := str(payload, "message")
	c := checkpoint{format: Codex, where: where, at: ts, summary: summary, before: p.lastTokens}
	c.source = record.NewMap()
	for _, k := range []string{"window_id", "window_number", "previous_window_id", "first_window_id"} {
		setIf(c.source, k, get(payload, k))
	}
	if hist, ok := payload.Get("replacement_history"); ok {
		arr, _ := hist.([]any)
		var recs []*record.Map
		// Items of the snapshot are not entries of the file: their metadata
		// is not counted.
		counted := p.rep.Metadata
		p.rep.Metadata = nil
		for _, e := range arr {
			if im, ok := e.(*record.Map); ok {
				recs = append(recs, p.item(where, im, nil)...)
			}
		}
		p.rep.Metadata = counted
		c.keepAll(snapshotOf(recs))
	} else {
		p.rep.approx(where, "a legacy compaction without replacement_history: rebuilt from the initial context, recent user messages and the summary")
		// The history so far: the latest compaction's snapshot, then what
		// came after it.
		var hist []*record.Map
		for _, r := range p.recs {
			if classOf(r.v) != "compaction" {
				hist = append(hist, r.v)
				continue
			}
			hist = hist[:0]
			for _, m := range arrAt(r.v, "messages") {
				if mm, ok := m.(*record.Map); ok {
					hist = append(hist, mm)
				}
			}
		}
		var initial, users []*record.Map
		for _, m := range hist {
			switch role, _ := m.String("role"); role {
			case "system":
				initial = append(initial, m)
			case "user":
				text := contentText(get(m, "content"))
				if strings.HasPrefix(text, "<environment_context>") || strings.HasPrefix(text, "<user_instructions>") {
					initial = append(initial, m)
				} else if !strings.HasPrefix(text, codexSummaryPrefix) {
					users = append(users, m)
				}
			}
		}
		budget, first := codexLegacyUserChars, len(users)
		for first > 0 && len(contentText(get(users[first-1], "content"))) <= budget {
			budget -= len(contentText(get(users[first-1], "content")))
			first--
		}
		c.keepAll(append(append(initial, users[first:]...),
			record.NewMap("role", "user", "content", []any{textBlock(codexSummaryPrefix + "\n" + summary)})))
		c.firstKept = len(initial)
	}
	raw, err := c.json()
	if err != nil {
		p.rep.unknown(where, "%v", err)
		return
	}
	p.recs = append(p.recs, codexRec{id: id, where: where, raw: raw})
}
