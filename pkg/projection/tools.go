package projection

import (
	"strings"
	"unicode"

	"github.com/ctxd/ctxd/pkg/record"
)

// OmittedImageText replaces an earlier browser screenshot (section 5).
const OmittedImageText = "[Earlier image omitted from the model context.]"

// DefaultBrowserTools names the tools whose screenshots are trimmed.
var DefaultBrowserTools = []string{"browser_use"}

// Options adjust the passes. The zero value uses the defaults.
type Options struct {
	// BrowserTools names the tools whose result images are trimmed to the
	// latest; nil means DefaultBrowserTools.
	BrowserTools []string
}

func (o Options) browserSet() map[string]bool {
	names := o.BrowserTools
	if names == nil {
		names = DefaultBrowserTools
	}
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}

// call is one tool call found in an assistant message.
type call struct {
	id   string // "" when the call has no id
	tool string // the tool name, "" when absent
	// provider marks a provider-executed call (providerExecuted is true):
	// it pairs like any call but is never removed for being unpaired.
	provider bool
	// block is the index in content, or -1 for a tool_calls entry, whose
	// index is entry. (int32 keeps a call, provider flag included, in 48
	// bytes.)
	block, entry int32
}

// result is one tool result: a whole result message (block -1) or a
// tool_result block of a user message.
type result struct {
	id     string
	block  int
	images int // image blocks in the result's content array
}

func roleOf(m *record.Map) string {
	r, _ := m.String("role")
	return r
}

// role is what the passes tell apart of a message's role. A session notes
// it as a message is appended, while the message is still in the cache,
// rather than reading it again when the message renders.
type role uint8

const (
	roleOther     role = iota
	roleAssistant      // "assistant"
	roleResult         // "toolResult", "tool"
	roleUser           // "user"
)

func roleKind(m *record.Map) role {
	switch roleOf(m) {
	case "assistant":
		return roleAssistant
	case "toolResult", "tool":
		return roleResult
	case "user":
		return roleUser
	}
	return roleOther
}

// firstString returns the first string among the keys of m, "" when none.
func firstString(m *record.Map, keys ...string) string {
	for _, k := range keys {
		if s, ok := m.String(k); ok {
			return s
		}
	}
	return ""
}

func isCallBlock(v any) (*record.Map, bool) {
	b, ok := v.(*record.Map)
	if !ok {
		return nil, false
	}
	switch t, _ := b.String("type"); t {
	case "toolCall", "tool_use", "tool_call":
		return b, true
	}
	return b, false
}

// callsOf lists the calls of a message, content blocks first, then
// tool_calls entries. Only assistant messages hold calls.
func callsOf(m *record.Map) []call {
	if roleOf(m) != "assistant" {
		return nil
	}
	var calls []call
	content, _ := m.Get("content")
	if arr, ok := content.([]any); ok {
		for i, e := range arr {
			if b, ok := isCallBlock(e); ok {
				name, _ := b.String("name")
				calls = append(calls, call{
					id:       firstString(b, "id", "toolCallId", "tool_call_id", "tool_call_id$"),
					tool:     name,
					provider: providerExecuted(b),
					block:    int32(i), entry: -1,
				})
			}
		}
	}
	tc, _ := m.Get("tool_calls")
	if arr, ok := tc.([]any); ok {
		for i, e := range arr {
			c := call{block: -1, entry: int32(i)}
			if em, ok := e.(*record.Map); ok {
				c.id, _ = em.String("id")
				c.tool = openAIToolName(em)
				c.provider = providerExecuted(em)
			}
			calls = append(calls, c)
		}
	}
	return calls
}

// providerExecuted reports whether a call block or tool_calls entry is
// provider-executed: its providerExecuted is the boolean true.
func providerExecuted(m *record.Map) bool {
	v, _ := m.Get("providerExecuted")
	return record.IsTrue(v)
}

func openAIToolName(e *record.Map) string {
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

// resultsOf lists the results a message carries: the message itself when
// its role is toolResult or tool, or the tool_result blocks of a user
// message, in block order.
func resultsOf(m *record.Map) []result {
	switch roleOf(m) {
	case "toolResult", "tool":
		content, _ := m.Get("content")
		return []result{{
			id:     firstString(m, "toolCallId", "tool_call_id", "tool_call_id$"),
			block:  -1,
			images: countImages(content),
		}}
	case "user":
		content, _ := m.Get("content")
		arr, ok := content.([]any)
		if !ok {
			return nil
		}
		var rs []result
		for i, e := range arr {
			b, ok := e.(*record.Map)
			if !ok {
				continue
			}
			if t, _ := b.String("type"); t != "tool_result" {
				continue
			}
			id, _ := b.String("tool_use_id")
			c, _ := b.Get("content")
			rs = append(rs, result{id: id, block: i, images: countImages(c)})
		}
		return rs
	}
	return nil
}

func isImage(v any) bool {
	b, ok := v.(*record.Map)
	if !ok {
		return false
	}
	t, _ := b.String("type")
	return t == "image"
}

func countImages(content any) int {
	arr, ok := content.([]any)
	if !ok {
		return 0
	}
	n := 0
	for _, e := range arr {
		if isImage(e) {
			n++
		}
	}
	return n
}

// omitImages returns a copy of content with every image block replaced by
// the omission notice.
func omitImages(content []any) []any {
	out := make([]any, len(content))
	for i, e := range content {
		if isImage(e) {
			out[i] = textBlock(OmittedImageText)
		} else {
			out[i] = e
		}
	}
	return out
}

// usable reports whether assistant content keeps the message on its own.
func usable(content any, present bool) bool {
	if !present {
		return false
	}
	switch x := content.(type) {
	case nil:
		return false
	case []any:
		return len(x) > 0
	case string:
		return strings.TrimFunc(x, unicode.IsSpace) != ""
	}
	return true
}

// rewrite renders one pass-1 message through passes 2 and 3. keepCall
// says whether a call with an id stays (a provider-executed call always
// does); keepResult whether a result (by its block,
// -1 for the message itself) stays; trim whether a kept result's images
// are replaced. It returns nil when the message is dropped, and m itself
// when nothing changes.
func rewrite(m *record.Map, kind role, calls []call, results []result,
	keepCall func(c call) bool, keepResult func(r result) bool, trim func(r result) bool) *record.Map {
	switch kind {
	case roleAssistant:
		return rewriteAssistant(m, calls, keepCall)
	case roleResult:
		r := results[0]
		if !keepResult(r) {
			return nil
		}
		if r.images > 0 && trim(r) {
			content, _ := m.Get("content")
			out := m.Clone()
			out.Set("content", omitImages(content.([]any)))
			return out
		}
		return m
	case roleUser:
		if len(results) == 0 {
			return m
		}
		content, _ := m.Get("content")
		arr := content.([]any)
		var out []any // nil until something changes
		ri := 0
		for i, e := range arr {
			if ri < len(results) && results[ri].block == i {
				r := results[ri]
				ri++
				if !keepResult(r) {
					if out == nil {
						out = append(make([]any, 0, len(arr)), arr[:i]...)
					}
					continue
				}
				if r.images > 0 && trim(r) {
					if out == nil {
						out = append(make([]any, 0, len(arr)), arr[:i]...)
					}
					blk := e.(*record.Map).Clone()
					c, _ := blk.Get("content")
					blk.Set("content", omitImages(c.([]any)))
					out = append(out, blk)
					continue
				}
			}
			if out != nil {
				out = append(out, e)
			}
		}
		if out == nil {
			return m
		}
		if len(out) == 0 {
			return nil
		}
		cp := m.Clone()
		cp.Set("content", out)
		return cp
	}
	return m
}

// keptAsIs reports whether rewrite returns the message itself: when it
// removes no call, drops no result and trims none, and an assistant
// message stands alone (standsAlone). It needs only what a message's
// entry keeps, and so decides for a message not decoded (lazy.go);
// TestShape_ReadsWhatThePassesRead holds it to rewrite.
func keptAsIs(kind role, calls []call, results []result, alone bool,
	keepCall func(c call) bool, keepResult func(r result) bool, trim func(r result) bool) bool {
	switch kind {
	case roleAssistant:
		for _, c := range calls {
			if !c.provider && (c.id == "" || !keepCall(c)) {
				return false
			}
		}
		return alone
	case roleResult, roleUser:
		for _, r := range results {
			if !keepResult(r) || r.images > 0 && trim(r) {
				return false
			}
		}
	}
	return true
}

// standsAlone reports whether an assistant message is kept when none of
// its calls is removed: its content is usable, or it has tool_calls.
func standsAlone(m *record.Map) bool {
	content, hasContent := m.Get("content")
	tc, _ := m.Get("tool_calls")
	tcArr, _ := tc.([]any)
	return usable(content, hasContent) || len(tcArr) > 0
}

func rewriteAssistant(m *record.Map, calls []call, keepCall func(c call) bool) *record.Map {
	removeBlock := map[int]bool{}
	removeEntry := map[int]bool{}
	for _, c := range calls {
		if c.provider || (c.id != "" && keepCall(c)) {
			continue
		}
		if c.block >= 0 {
			removeBlock[int(c.block)] = true
		} else {
			removeEntry[int(c.entry)] = true
		}
	}
	content, hasContent := m.Get("content")
	tc, _ := m.Get("tool_calls")
	tcArr, tcIsArr := tc.([]any)
	if len(removeBlock) > 0 {
		arr := content.([]any)
		kept := make([]any, 0, len(arr)-len(removeBlock))
		for i, e := range arr {
			if !removeBlock[i] {
				kept = append(kept, e)
			}
		}
		content = kept
	}
	if len(removeEntry) > 0 {
		kept := make([]any, 0, len(tcArr)-len(removeEntry))
		for i, e := range tcArr {
			if !removeEntry[i] {
				kept = append(kept, e)
			}
		}
		tcArr = kept
	}
	if !usable(content, hasContent) && !(tcIsArr && len(tcArr) > 0) {
		return nil
	}
	if len(removeBlock) == 0 && len(removeEntry) == 0 {
		return m
	}
	out := m.Clone()
	if len(removeBlock) > 0 {
		out.Set("content", content)
	}
	if len(removeEntry) > 0 {
		out.Set("tool_calls", tcArr)
	}
	return out
}
