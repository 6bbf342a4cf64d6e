package edits

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// Options are what Apply needs of the request and of the rendering.
type Options struct {
	// Seqs holds the stream sequence of each message's record
	// (projection.Session.MessageSeqs); nil reports 0.
	Seqs []uint64
	// Budget is the request's budget_tokens, when HasBudget: the trigger
	// of tool_results without one of its own.
	Budget    uint64
	HasBudget bool
	// Tokens estimates the input tokens of a context in the requested
	// format (the reply's usage). Required when the config has
	// tool_results; without it the report's token figures are 0.
	Tokens func(messages []any) int
	// ValueTokens estimates the tokens of one value within the rendered
	// body: a result's content. Required with tool_results.
	ValueTokens func(v any) int
}

// Cleared is a tool result whose content was cleared.
type Cleared struct {
	ID     string
	Tool   string
	Seq    uint64
	Tokens int // the estimate of the content cleared
	// Message indexes the messages; Block is the tool_result block of a
	// user message, -1 for a result message. The reply does not carry
	// them (Map).
	Message, Block int
}

// Removed locates a thinking block or image an edit removed: Message
// indexes the unedited messages, Block its content (for an image inside a
// tool_result block, that block's index).
type Removed struct {
	Seq     uint64
	Message int
	Block   int
}

// Report says what Apply changed.
type Report struct {
	Cleared         []Cleared
	ThinkingRemoved []Removed
	ImagesRemoved   []Removed
	// TokensBefore and TokensAfter are the estimates of the context before
	// and after the edits (Options.Tokens).
	TokensBefore, TokensAfter int
}

// Map returns the report as the reply carries it.
func (r Report) Map() *record.Map {
	cleared := make([]any, len(r.Cleared))
	for i, c := range r.Cleared {
		cleared[i] = record.NewMap("id", c.ID, "tool", c.Tool, "seq", c.Seq, "tokens", int64(c.Tokens))
	}
	return record.NewMap(
		"tool_results_cleared", cleared,
		"thinking_removed", removedList(r.ThinkingRemoved),
		"images_removed", removedList(r.ImagesRemoved),
		"tokens_before", int64(r.TokensBefore),
		"tokens_after", int64(r.TokensAfter),
	)
}

func removedList(rs []Removed) []any {
	out := make([]any, len(rs))
	for i, r := range rs {
		out[i] = record.NewMap("seq", r.Seq, "message", int64(r.Message), "block", int64(r.Block))
	}
	return out
}

// ClearedText is the text a cleared result's content becomes.
func ClearedText(tool, id string, tokens int) string {
	if tool == "" {
		return fmt.Sprintf("[tool result cleared: %s, %d tokens]", id, tokens)
	}
	return fmt.Sprintf("[tool result cleared: %s %s, %d tokens]", tool, id, tokens)
}

// Apply applies c to the neutral messages (projection values) and returns
// the edited messages, their sequences, and what changed. The messages are
// not modified: what changes is copied. Thinking is removed first, then
// images, then tool results are cleared, on the context the other edits
// left. A nil c returns the messages as they are.
func Apply(messages []any, c *Config, opt Options) ([]any, []uint64, Report) {
	var rep Report
	seqs := opt.Seqs
	if len(seqs) != len(messages) {
		seqs = make([]uint64, len(messages))
	}
	if c == nil {
		return messages, seqs, rep
	}
	e := &editor{msgs: append([]any(nil), messages...), seqs: seqs}
	if opt.Tokens != nil {
		rep.TokensBefore = opt.Tokens(messages)
	}
	if c.Thinking != nil {
		e.thinking(c.Thinking.KeepTurns, &rep)
	}
	if c.Images != nil {
		e.images(c.Images.Keep, c.Images.Batch, &rep)
	}
	if t := c.ToolResults; t != nil {
		trigger := t.TriggerTokens
		if !t.HasTrigger {
			trigger = opt.Budget
		}
		e.toolResults(t, trigger, rep.TokensBefore, opt, &rep)
	}
	out, outSeqs := e.result()
	if opt.Tokens != nil {
		rep.TokensAfter = opt.Tokens(out)
	}
	return out, outSeqs, rep
}

// editor holds the messages being edited: a message or block is cloned
// the first time it changes (own), never written in place.
type editor struct {
	msgs  []any
	seqs  []uint64
	owned map[any]bool
}

func (e *editor) result() ([]any, []uint64) { return e.msgs, e.seqs }

// own returns a copy of m this editor may change, made once.
func (e *editor) own(m *record.Map) *record.Map {
	if e.owned[m] {
		return m
	}
	if e.owned == nil {
		e.owned = map[any]bool{}
	}
	c := m.Clone()
	e.owned[c] = true
	return c
}

// message returns message i, owned, and its content array, copied once.
func (e *editor) content(i int) (*record.Map, []any) {
	m := e.own(e.msgs[i].(*record.Map))
	e.msgs[i] = m
	arr, _ := get(m, "content").([]any)
	if !e.owned[sliceKey(arr)] {
		arr = append([]any(nil), arr...)
		m.Set("content", arr)
		e.owned[sliceKey(arr)] = true
	}
	return m, arr
}

// sliceKey identifies a slice by its first element's address.
func sliceKey(a []any) any {
	if len(a) == 0 {
		return nil
	}
	return &a[0]
}

func get(m *record.Map, k string) any {
	v, _ := m.Get(k)
	return v
}

func role(v any) string {
	m, ok := v.(*record.Map)
	if !ok {
		return ""
	}
	r, _ := m.String("role")
	return r
}

// thinking removes the thinking blocks of assistant messages before the
// last keep; the last assistant message keeps its thinking when it holds
// a tool call, which Anthropic requires while the tool loop goes on. A
// message of thinking alone stays, its content empty: the renderings
// leave it out as they left out its thinking, and the turns around it
// render as they did.
func (e *editor) thinking(keep int, rep *Report) {
	var assistants []int
	for i, v := range e.msgs {
		if role(v) == "assistant" {
			assistants = append(assistants, i)
		}
	}
	n := len(assistants) - keep
	if n > 0 && n == len(assistants) && hasCall(e.msgs[assistants[n-1]].(*record.Map)) {
		n--
	}
	for _, i := range assistants[:max(n, 0)] {
		arr, _ := get(e.msgs[i].(*record.Map), "content").([]any)
		var gone []int
		for b, blk := range arr {
			if isThinking(blk) {
				gone = append(gone, b)
			}
		}
		if len(gone) == 0 {
			continue
		}
		m := e.own(e.msgs[i].(*record.Map))
		e.msgs[i] = m
		kept := make([]any, 0, len(arr)-len(gone))
		for _, blk := range arr {
			if !isThinking(blk) {
				kept = append(kept, blk)
			}
		}
		m.Set("content", kept)
		for _, b := range gone {
			rep.ThinkingRemoved = append(rep.ThinkingRemoved, Removed{Seq: e.seqs[i], Message: i, Block: b})
		}
	}
}

func isThinking(v any) bool {
	b, ok := v.(*record.Map)
	if !ok {
		return false
	}
	t, _ := b.String("type")
	return t == "thinking" || t == "redacted_thinking" || t == "reasoning"
}

func hasToolCalls(m *record.Map) bool {
	arr, _ := get(m, "tool_calls").([]any)
	return len(arr) > 0
}

func hasCall(m *record.Map) bool {
	if hasToolCalls(m) {
		return true
	}
	arr, _ := get(m, "content").([]any)
	for _, v := range arr {
		if b, ok := v.(*record.Map); ok && isCallType(b) {
			return true
		}
	}
	return false
}

func isCallType(b *record.Map) bool {
	switch t, _ := b.String("type"); t {
	case "toolCall", "tool_use", "tool_call":
		return true
	}
	return false
}

func isImage(v any) bool {
	b, ok := v.(*record.Map)
	if !ok {
		return false
	}
	t, _ := b.String("type")
	return t == "image" || t == "image_url"
}

// imageAt locates an image: in message m's content at block b, or, when
// inner >= 0, in the content of its tool_result block b at inner.
type imageAt struct{ m, b, inner int }

// images replaces the images before the last keep by the notice, a
// multiple of batch of them.
func (e *editor) images(keep, batch int, rep *Report) {
	var all []imageAt
	for i, v := range e.msgs {
		m, ok := v.(*record.Map)
		if !ok {
			continue
		}
		arr, _ := get(m, "content").([]any)
		for b, blk := range arr {
			if isImage(blk) {
				all = append(all, imageAt{i, b, -1})
				continue
			}
			if bm, ok := blk.(*record.Map); ok && role(m) == "user" {
				if t, _ := bm.String("type"); t == "tool_result" {
					inner, _ := get(bm, "content").([]any)
					for k, x := range inner {
						if isImage(x) {
							all = append(all, imageAt{i, b, k})
						}
					}
				}
			}
		}
	}
	n := (len(all) - keep) / batch * batch
	if n <= 0 {
		return
	}
	notice := func() any { return record.NewMap("type", "text", "text", projection.OmittedImageText) }
	for _, at := range all[:n] {
		_, arr := e.content(at.m)
		if at.inner < 0 {
			arr[at.b] = notice()
		} else {
			blk := e.own(arr[at.b].(*record.Map))
			arr[at.b] = blk
			inner, _ := get(blk, "content").([]any)
			if !e.owned[sliceKey(inner)] {
				inner = append([]any(nil), inner...)
				blk.Set("content", inner)
				e.owned[sliceKey(inner)] = true
			}
			inner[at.inner] = notice()
		}
		rep.ImagesRemoved = append(rep.ImagesRemoved, Removed{Seq: e.seqs[at.m], Message: at.m, Block: at.b})
	}
}

// result is a tool result of the context: a result message (block -1) or
// a tool_result block of a user message.
type result struct {
	m, b    int
	id      string
	tool    string
	content any
	tokens  int // of its content
	saves   int // clearing it saves
}

// results lists the context's tool results in order, each with its
// call's tool name.
func (e *editor) results() []result {
	tools := map[string]string{}
	var out []result
	for i, v := range e.msgs {
		m, ok := v.(*record.Map)
		if !ok {
			continue
		}
		switch role(m) {
		case "assistant":
			arr, _ := get(m, "content").([]any)
			for _, x := range arr {
				if b, ok := x.(*record.Map); ok && isCallType(b) {
					id := firstString(b, "id", "toolCallId", "tool_call_id", "tool_call_id$")
					name, _ := b.String("name")
					tools[id] = name
				}
			}
			tc, _ := get(m, "tool_calls").([]any)
			for _, x := range tc {
				if b, ok := x.(*record.Map); ok {
					id, _ := b.String("id")
					name := ""
					if f, ok := get(b, "function").(*record.Map); ok {
						name, _ = f.String("name")
					}
					if name == "" {
						name, _ = b.String("name")
					}
					tools[id] = name
				}
			}
		case "toolResult", "tool":
			id := firstString(m, "toolCallId", "tool_call_id", "tool_call_id$")
			tool, ok := tools[id]
			if !ok {
				tool, _ = m.String("toolName")
			}
			out = append(out, result{m: i, b: -1, id: id, tool: tool, content: get(m, "content")})
		case "user":
			arr, _ := get(m, "content").([]any)
			for b, x := range arr {
				if bm, ok := x.(*record.Map); ok {
					if t, _ := bm.String("type"); t == "tool_result" {
						id, _ := bm.String("tool_use_id")
						out = append(out, result{m: i, b: b, id: id, tool: tools[id], content: get(bm, "content")})
					}
				}
			}
		}
	}
	return out
}

func firstString(m *record.Map, keys ...string) string {
	for _, k := range keys {
		if s, ok := m.String(k); ok {
			return s
		}
	}
	return ""
}

// toolResults clears the oldest clearable results until what they save
// reaches the excess over trigger rounded up to a multiple of the step.
func (e *editor) toolResults(t *ToolResults, trigger uint64, before int, opt Options, rep *Report) {
	if uint64(before) <= trigger {
		return
	}
	all := e.results()
	excluded := make(map[string]bool, len(t.ExcludeTools))
	for _, name := range t.ExcludeTools {
		excluded[name] = true
	}
	var clearable []result
	for _, r := range all[:max(len(all)-t.Keep, 0)] {
		if excluded[r.tool] {
			continue
		}
		r.tokens = opt.ValueTokens(r.content)
		// Less 2 for the rounding of each estimate to whole tokens: what
		// the results are counted to save, the body's estimate saves at
		// least.
		r.saves = r.tokens - opt.ValueTokens(clearedContent(r)) - 2
		if r.saves <= 0 {
			continue // already no longer than its notice
		}
		clearable = append(clearable, r)
	}
	if len(clearable) == 0 {
		return
	}
	excess := uint64(before) - trigger
	step := max(t.ClearAtLeastTokens, 1)
	target := (excess + step - 1) / step * step
	k, saved := 0, uint64(0)
	for k < len(clearable) && saved < target {
		saved += uint64(clearable[k].saves)
		k++
	}
	// The savings are estimated result by result; the body's estimate
	// decides. Clear more while the edited context stays over the
	// trigger and clearing more would help.
	over := func(k int) bool {
		trial := e.fork()
		trial.clear(clearable[:k], t.ClearInputs)
		msgs, _ := trial.result()
		return uint64(opt.Tokens(msgs)) > trigger
	}
	if k < len(clearable) && over(k) {
		lo, hi := k, len(clearable) // over(lo); find the least k in (lo, hi] not over
		step := 1
		for lo+step < hi && over(lo+step) {
			lo += step
			step *= 2
		}
		hi = min(lo+step, hi)
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if over(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		k = hi
	}
	e.clear(clearable[:k], t.ClearInputs)
	for _, r := range clearable[:k] {
		rep.Cleared = append(rep.Cleared, Cleared{ID: r.id, Tool: r.tool, Seq: e.seqs[r.m], Tokens: r.tokens, Message: r.m, Block: r.b})
	}
}

// fork returns an editor over the same messages whose changes do not
// reach e.
func (e *editor) fork() *editor {
	return &editor{msgs: append([]any(nil), e.msgs...), seqs: e.seqs}
}

// clearedContent is what the content of r becomes: the notice, as a
// string where the content was one, else as one text block.
func clearedContent(r result) any {
	text := ClearedText(r.tool, r.id, r.tokens)
	if _, ok := r.content.(string); ok {
		return text
	}
	return []any{record.NewMap("type", "text", "text", text)}
}

func (e *editor) clear(rs []result, inputs bool) {
	var ids map[string]bool
	for _, r := range rs {
		if r.b < 0 {
			m := e.own(e.msgs[r.m].(*record.Map))
			e.msgs[r.m] = m
			m.Set("content", clearedContent(r))
		} else {
			_, arr := e.content(r.m)
			blk := e.own(arr[r.b].(*record.Map))
			arr[r.b] = blk
			blk.Set("content", clearedContent(r))
		}
		if inputs {
			if ids == nil {
				ids = map[string]bool{}
			}
			ids[r.id] = true
		}
	}
	if ids != nil {
		e.clearInputs(ids)
	}
}

// clearInputs replaces the arguments of the calls with the given ids by
// {} (a JSON string "{}" where the arguments were a string, as OpenAI's
// tool_calls carry them).
func (e *editor) clearInputs(ids map[string]bool) {
	for i, v := range e.msgs {
		if role(v) != "assistant" {
			continue
		}
		m := v.(*record.Map)
		arr, _ := get(m, "content").([]any)
		for b, x := range arr {
			blk, ok := x.(*record.Map)
			if !ok || !isCallType(blk) || !ids[firstString(blk, "id", "toolCallId", "tool_call_id", "tool_call_id$")] {
				continue
			}
			_, own := e.content(i)
			blk = e.own(blk)
			own[b] = blk
			for _, key := range []string{"arguments", "input"} {
				if a, ok := blk.Get(key); ok {
					blk.Set(key, emptyArgs(a))
				}
			}
		}
		tc, _ := get(e.msgs[i].(*record.Map), "tool_calls").([]any)
		for k, x := range tc {
			entry, ok := x.(*record.Map)
			if !ok {
				continue
			}
			if id, _ := entry.String("id"); !ids[id] {
				continue
			}
			mm := e.own(e.msgs[i].(*record.Map))
			e.msgs[i] = mm
			list, _ := get(mm, "tool_calls").([]any)
			if !e.owned[sliceKey(list)] {
				list = append([]any(nil), list...)
				mm.Set("tool_calls", list)
				e.owned[sliceKey(list)] = true
			}
			entry = e.own(entry)
			list[k] = entry
			if f, ok := get(entry, "function").(*record.Map); ok {
				if a, ok := f.Get("arguments"); ok {
					f = e.own(f)
					f.Set("arguments", emptyArgs(a))
					entry.Set("function", f)
				}
			}
			if a, ok := entry.Get("arguments"); ok {
				entry.Set("arguments", emptyArgs(a))
			}
		}
	}
}

func emptyArgs(a any) any {
	if _, ok := a.(string); ok {
		return "{}"
	}
	return record.NewMap()
}
