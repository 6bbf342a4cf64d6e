package render

import (
	"net/url"
	"slices"
	"strings"
	"unicode"

	"github.com/ctxd/ctxd/pkg/record"
)

// A plan is the neutral context taken apart into what every provider has
// in common: text, images, thinking, calls and results, each call paired
// with at most one result and every result placed in a group right after
// its call's message. The per-format emitters build the body from it.

type itemKind uint8

const (
	userItem itemKind = iota
	assistantItem
	systemItem
	resultsItem // the results of the assistant item before it, in call order
)

type partKind uint8

const (
	textPart partKind = iota
	imagePart
	thinkingPart
	redactedPart
	callPart
)

// image is an image block: inline base64 data, or a URL.
type image struct {
	mime, data, url string
}

type part struct {
	kind partKind
	text string // text, or thinking
	sig  string // a thinking block's signature, a redacted block's data
	img  image
	call *call
	// block indexes the neutral message's content: the part's own block,
	// or for a part of a tool_result block that block's; -1 for string
	// content.
	block int
}

type call struct {
	id, name   string
	wire, tool string // the id and name as sent
	args       any    // the arguments as the neutral message has them
	hasArgs    bool
	provider   bool
	thoughtSig string
	res        *result
	src, block int // block -1 for a tool_calls entry
	drop       string
}

type result struct {
	id            string
	parts         []part
	isErr         bool
	stringContent bool
	src, block    int // block -1 for a result message
	call          *call
}

type item struct {
	kind          itemKind
	src           int
	parts         []part
	results       []*result
	stringContent bool // the neutral content was a string
	msg           *record.Map
}

type plan struct {
	pv      *provider
	msgs    []any
	opt     Options
	items   []*item // extraction order; after layout, output order
	calls   []*call
	results []*result
	report  Report
	ids     *idMap

	// An incremental rendering (incremental.go) takes apart only the
	// messages from start on; the ones before are a closed prefix whose
	// calls the ids hold, and from is the state after them. Marks records
	// the closed boundaries met on the way.
	start int
	from  *checkpoint
	marks []checkpoint
	track bool
	bad   []int32 // bad[S] summed up to S: calls before S not answered before S
	badAt int
	badN  int32
	// userTurn: a user turn (Gemini: one with a part sent) came before,
	// after the leading system messages.
	userTurn bool
}

func newPlan(pv *provider, msgs []any, opt Options) *plan {
	return &plan{pv: pv, msgs: msgs, opt: opt, ids: newIDMap(pv.idMax)}
}

func (p *plan) change(c Change) { p.report.Changes = append(p.report.Changes, c) }

func (p *plan) removed(kind string, msg, block int, reason string) {
	p.change(Change{Kind: kind, Message: msg, Block: block, Reason: reason})
}

func blank(s string) bool { return strings.TrimFunc(s, unicode.IsSpace) == "" }

// extract takes every message apart.
func (p *plan) extract() {
	for i := p.start; i < len(p.msgs); i++ {
		v := p.msgs[i]
		m, ok := v.(*record.Map)
		if !ok {
			p.removed(MessageRemoved, i, -1, "not a message")
			continue
		}
		role, _ := m.String("role")
		content, has := m.Get("content")
		switch role {
		case "system", "user", "assistant":
			kind := userItem
			switch role {
			case "system":
				kind = systemItem
			case "assistant":
				kind = assistantItem
			}
			it := &item{kind: kind, src: i, msg: m}
			switch c := content.(type) {
			case string:
				it.stringContent = true
				if !blank(c) {
					it.parts = append(it.parts, part{kind: textPart, text: c, block: -1})
				}
			case []any:
				for b, e := range c {
					p.block(it, b, e)
				}
			default:
				if has && c != nil {
					p.removed(BlockRemoved, i, -1, "content is neither text nor blocks")
				}
			}
			if kind == assistantItem {
				p.toolCalls(it, m)
			}
			p.items = append(p.items, it)
		case "toolResult", "tool":
			r := &result{id: firstString(m, "toolCallId", "tool_call_id", "tool_call_id$"), src: i, block: -1, isErr: isError(m)}
			p.resultContent(r, content)
			p.results = append(p.results, r)
		default:
			p.removed(MessageRemoved, i, -1, "role "+quote(role))
		}
	}
}

func quote(s string) string {
	if s == "" {
		return "missing"
	}
	return `"` + s + `"`
}

func firstString(m *record.Map, keys ...string) string {
	for _, k := range keys {
		if s, ok := m.String(k); ok {
			return s
		}
	}
	return ""
}

func isError(m *record.Map) bool {
	a, _ := m.Get("isError")
	b, _ := m.Get("is_error")
	return record.IsTrue(a) || record.IsTrue(b)
}

// block takes one element of a message's content array.
func (p *plan) block(it *item, b int, e any) {
	blk, ok := e.(*record.Map)
	if !ok {
		p.removed(BlockRemoved, it.src, b, "not a block")
		return
	}
	typ, _ := blk.String("type")
	switch typ {
	case "text":
		t, ok := blk.String("text")
		switch {
		case !ok:
			p.removed(BlockRemoved, it.src, b, "text is not a string")
		case blank(t):
			p.removed(BlockRemoved, it.src, b, "empty text")
		default:
			it.parts = append(it.parts, part{kind: textPart, text: t, block: b})
		}
		return
	case "image", "image_url":
		if it.kind != userItem {
			p.removed(BlockRemoved, it.src, b, "image outside a user message or tool result")
			return
		}
		img, reason := sendable(blk)
		if reason != "" {
			p.removed(BlockRemoved, it.src, b, reason)
			return
		}
		it.parts = append(it.parts, part{kind: imagePart, img: img, block: b})
		return
	case "thinking", "redacted_thinking":
		if it.kind != assistantItem {
			p.removed(BlockRemoved, it.src, b, "thinking outside an assistant message")
			return
		}
		if typ == "redacted_thinking" || record.IsTrue(get(blk, "redacted")) {
			data := firstString(blk, "data", "thinkingSignature", "signature")
			it.parts = append(it.parts, part{kind: redactedPart, sig: data, block: b})
			return
		}
		t, _ := blk.String("thinking")
		it.parts = append(it.parts, part{kind: thinkingPart, text: t, sig: firstString(blk, "signature", "thinkingSignature"), block: b})
		return
	case "toolCall", "tool_use", "tool_call":
		if it.kind != assistantItem {
			p.removed(BlockRemoved, it.src, b, "tool call outside an assistant message")
			return
		}
		c := &call{
			id:       firstString(blk, "id", "toolCallId", "tool_call_id", "tool_call_id$"),
			provider: record.IsTrue(get(blk, "providerExecuted")),
			src:      it.src, block: b,
		}
		c.name, _ = blk.String("name")
		c.args, c.hasArgs = blk.Get("arguments")
		if !c.hasArgs {
			c.args, c.hasArgs = blk.Get("input")
		}
		c.thoughtSig, _ = blk.String("thoughtSignature")
		p.addCall(it, c, b)
		return
	case "tool_result":
		if it.kind != userItem {
			p.removed(BlockRemoved, it.src, b, "tool result outside a user message")
			return
		}
		id, _ := blk.String("tool_use_id")
		r := &result{id: id, src: it.src, block: b, isErr: isError(blk)}
		c, _ := blk.Get("content")
		p.resultContent(r, c)
		p.results = append(p.results, r)
		return
	}
	p.removed(BlockRemoved, it.src, b, "unsupported block type "+quote(typ))
}

func get(m *record.Map, k string) any {
	v, _ := m.Get(k)
	return v
}

func (p *plan) addCall(it *item, c *call, b int) {
	if c.name == "" {
		c.drop = "no tool name"
	}
	p.calls = append(p.calls, c)
	it.parts = append(it.parts, part{kind: callPart, call: c, block: b})
}

// toolCalls takes the OpenAI-style tool_calls entries of an assistant
// message: calls after those of its content.
func (p *plan) toolCalls(it *item, m *record.Map) {
	tc, _ := m.Get("tool_calls")
	arr, _ := tc.([]any)
	for k, e := range arr {
		em, ok := e.(*record.Map)
		if !ok {
			continue // never a call (CONTEXT.md section 3): pass 2 kept it, nothing to send
		}
		c := &call{src: it.src, block: -1 - k, provider: record.IsTrue(get(em, "providerExecuted"))}
		c.id, _ = em.String("id")
		if f, ok := get(em, "function").(*record.Map); ok {
			c.name, _ = f.String("name")
			c.args, c.hasArgs = f.Get("arguments")
		}
		if c.name == "" {
			c.name, _ = em.String("name")
		}
		if !c.hasArgs {
			c.args, c.hasArgs = em.Get("arguments")
		}
		p.addCall(it, c, -1-k)
	}
}

// resultContent takes a result's content: text and images. A block of a
// result message is reported at its own index; one of a tool_result block
// at that block's, the index the message's content has.
func (p *plan) resultContent(r *result, content any) {
	switch c := content.(type) {
	case string:
		r.stringContent = true
		switch {
		case !blank(c):
			r.parts = append(r.parts, part{kind: textPart, text: c, block: r.block})
		case c != "":
			p.removed(BlockRemoved, r.src, r.block, "empty text in a tool result")
		}
	case []any:
		for b, e := range c {
			if r.block >= 0 {
				b = r.block
			}
			blk, ok := e.(*record.Map)
			if !ok {
				p.removed(BlockRemoved, r.src, b, "not a block in a tool result")
				continue
			}
			switch typ, _ := blk.String("type"); typ {
			case "text":
				if t, ok := blk.String("text"); ok && !blank(t) {
					r.parts = append(r.parts, part{kind: textPart, text: t, block: b})
				} else {
					p.removed(BlockRemoved, r.src, b, "empty text in a tool result")
				}
			case "image", "image_url":
				img, reason := sendable(blk)
				if reason != "" {
					p.removed(BlockRemoved, r.src, b, reason+" in a tool result")
					continue
				}
				r.parts = append(r.parts, part{kind: imagePart, img: img, block: b})
			default:
				p.removed(BlockRemoved, r.src, b, "unsupported block type "+quote(typ)+" in a tool result")
			}
		}
	}
}

// parseImage reads the image shapes records carry: pi's {data, mimeType},
// Anthropic's {source: {type: base64|url, ...}} and OpenAI's image_url
// with a data: or http(s) URL. The reason is "" when it is an image.
func parseImage(b *record.Map) (image, string) {
	if typ, _ := b.String("type"); typ == "image_url" {
		var u string
		switch x := get(b, "image_url").(type) {
		case string:
			u = x
		case *record.Map:
			u, _ = x.String("url")
		}
		return imageURL(u)
	}
	if data, ok := b.String("data"); ok {
		mime, _ := b.String("mimeType")
		if mime == "" {
			mime, _ = b.String("media_type")
		}
		return inline(mime, data)
	}
	src, ok := get(b, "source").(*record.Map)
	if !ok {
		return image{}, "image without data"
	}
	switch t, _ := src.String("type"); t {
	case "base64":
		mime, _ := src.String("media_type")
		data, _ := src.String("data")
		return inline(mime, data)
	case "url":
		u, _ := src.String("url")
		return imageURL(u)
	}
	return image{}, "image source of an unsupported type"
}

func inline(mime, data string) (image, string) {
	switch {
	case data == "":
		return image{}, "image without data"
	case mime == "":
		return image{}, "image without a media type"
	}
	return image{mime: mime, data: data}, ""
}

// sendable parses an image block of the neutral context for a body: as
// parseImage, and refusing inline data that is not base64. (The images of
// a rendered body were checked on their way in: Estimate reads them with
// parseImage.)
func sendable(b *record.Map) (image, string) {
	img, reason := parseImage(b)
	if reason == "" && img.url == "" && !isBase64(img.data) {
		return image{}, "image data not base64"
	}
	return img, reason
}

// isBase64 reports whether s is standard, padded base64, as every
// provider takes image data: whole groups of four, "=" only at the end.
// It reads every byte, eight at a time, without decoding: images are
// large and checked on every render.
func isBase64(s string) bool {
	if len(s)%4 != 0 {
		return false
	}
	end := len(s)
	if end > 0 && s[end-1] == '=' {
		end--
		if s[end-1] == '=' {
			end--
		}
	}
	i := 0
	for ; i+8 <= end; i += 8 {
		w := s[i : i+8] // one bounds check, and the loads become one
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		if !base64Word(x) {
			return false
		}
	}
	for ; i < end; i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '/' && c <= '9' || c == '+') {
			return false
		}
	}
	return true
}

// base64Word reports whether each of the eight bytes of x is in the
// base64 alphabet: '+', '/' to '9' (the slash and the digits), 'A' to 'Z'
// or 'a' to 'z'. For a byte b below 0x80, b+(0x80-lo) has its high bit
// set when b >= lo, and b+(0x7f-hi) has it clear when b <= hi; no sum
// carries into the next byte.
func base64Word(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	if x&highs != 0 {
		return false
	}
	plus := (x + ones*(0x80-'+')) &^ (x + ones*(0x7f-'+'))
	digits := (x + ones*(0x80-'/')) &^ (x + ones*(0x7f-'9'))
	upper := (x + ones*(0x80-'A')) &^ (x + ones*(0x7f-'Z'))
	lower := (x + ones*(0x80-'a')) &^ (x + ones*(0x7f-'z'))
	return (plus|digits|upper|lower)&highs == highs
}

func imageURL(u string) (image, string) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		mime, data, ok := strings.Cut(rest, ";base64,")
		if !ok {
			return image{}, "data URL not in base64"
		}
		return inline(mime, data)
	}
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		// A provider fetches it: OpenAI's schema wants a URI, and none
		// can fetch from a URL that does not parse or names no host.
		if pu, err := url.Parse(u); err != nil || pu.Host == "" {
			return image{}, "image URL not valid"
		}
		return image{url: u}, ""
	}
	return image{}, "image without data"
}

// pair gives each call at most one result: a result answers the earliest
// call with its id before it that has no result yet. A later result for
// an answered call is a duplicate, dropped; a call left without a result
// cannot be sent (every provider refuses it), and is removed. Never is a
// result made up.
func (p *plan) pair() {
	byID := map[string][]*call{}
	for _, c := range p.calls {
		byID[c.id] = append(byID[c.id], c)
	}
	for _, r := range p.results {
		if r.id == "" {
			p.change(Change{Kind: ResultRemoved, Message: r.src, Block: r.block, Reason: "no id"})
			continue
		}
		var target *call
		seen := p.ids.count(r.id) > 0 // a call of the prefix, answered there
		for _, c := range byID[r.id] {
			if c.src >= r.src {
				break
			}
			seen = true
			if c.res == nil {
				target = c
				break
			}
		}
		switch {
		case target != nil:
			target.res, r.call = r, target
		case seen:
			p.change(Change{Kind: DuplicateResult, Message: r.src, Block: r.block, ID: r.id})
		default:
			p.change(Change{Kind: ResultRemoved, Message: r.src, Block: r.block, ID: r.id, Reason: "no call before it"})
		}
	}
	for _, c := range p.calls {
		switch {
		case c.res == nil && c.provider:
			c.drop = "provider-executed, no result"
		case c.res == nil && c.drop == "":
			c.drop = "no result"
		case c.res != nil && c.drop != "":
			p.change(Change{Kind: ResultRemoved, Message: c.res.src, Block: c.res.block, ID: c.id, Reason: "its call is removed"})
			c.res.call, c.res = nil, nil
		}
		if c.drop != "" {
			p.change(Change{Kind: CallRemoved, Message: c.src, Block: c.block, ID: c.id, Reason: c.drop})
		}
	}
	p.mapIDs()
}

// mapIDs gives every call the id and tool name it is sent with.
func (p *plan) mapIDs() {
	ids := p.ids
	for _, c := range p.calls {
		c.wire = ids.wire(c.id) // every call counts, sent or not: stable as results arrive
		if c.drop != "" {
			continue
		}
		if c.wire != c.id {
			p.change(Change{Kind: IDRenamed, Message: c.src, Block: c.block, ID: c.id, To: c.wire})
		}
		c.tool = toolName(p.pv, c.name)
		if c.tool != c.name {
			p.change(Change{Kind: NameRenamed, Message: c.src, Block: c.block, ID: c.id, Reason: c.name, To: c.tool})
		}
	}
}

// layout drops the calls that cannot be sent and places each kept
// result in a group right after its call's message, in call order.
func (p *plan) layout() {
	out := make([]*item, 0, len(p.items)+len(p.calls))
	for _, it := range p.items {
		if it.kind != assistantItem {
			out = append(out, it)
			continue
		}
		var group []*result
		parts := it.parts[:0:0]
		for _, pt := range it.parts {
			if pt.kind == callPart {
				if pt.call.drop != "" {
					continue
				}
				group = append(group, pt.call.res)
			}
			parts = append(parts, pt)
		}
		it.parts = parts
		out = append(out, it)
		if len(group) > 0 {
			out = append(out, &item{kind: resultsItem, src: it.src, results: group})
		}
	}
	p.items = out
	p.reportMoves()
}

// reportMoves reports the results that do not already sit right after
// their call's message, in call order.
func (p *plan) reportMoves() {
	// content[j-p.start]: message j has content of its own (not
	// results). Every message the plan took apart is from p.start on.
	content := make([]bool, len(p.msgs)-p.start)
	userAt := map[int]*item{}
	for _, it := range p.items {
		if it.kind != resultsItem && len(it.parts) > 0 {
			content[it.src-p.start] = true
			if it.kind == userItem {
				userAt[it.src] = it
			}
		}
	}
	// groupOf[j-p.start]: the call message whose group message j's results all
	// join; -1 for none, -2 for several.
	groupOf := make([]int, len(p.msgs)-p.start)
	for j := range groupOf {
		groupOf[j] = -1
	}
	for _, r := range p.results {
		if r.call == nil {
			continue
		}
		switch g := groupOf[r.src-p.start]; {
		case g == -1:
			groupOf[r.src-p.start] = r.call.src
		case g != r.call.src:
			groupOf[r.src-p.start] = -2
		}
	}
	for _, it := range p.items {
		if it.kind != resultsItem {
			continue
		}
		sorted := slices.Clone(it.results)
		slices.SortStableFunc(sorted, func(a, b *result) int {
			if a.src != b.src {
				return a.src - b.src
			}
			return a.block - b.block
		})
		for k, r := range it.results {
			moved := sorted[k] != r
			for j := it.src + 1; j < r.src && !moved; j++ {
				moved = content[j-p.start] || (groupOf[j-p.start] != -1 && groupOf[j-p.start] != it.src)
			}
			if u := userAt[r.src]; !moved && r.block >= 0 && u != nil {
				// Content of the user message before the block.
				moved = u.parts[0].block < r.block
			}
			if moved {
				p.change(Change{Kind: ResultMoved, Message: r.src, Block: r.block, ID: r.id})
			}
		}
	}
}

func (p *plan) sortChanges() {
	slices.SortStableFunc(p.report.Changes, func(a, b Change) int { return a.Message - b.Message })
	if p.opt.Seqs == nil {
		return
	}
	for i := range p.report.Changes {
		if m := p.report.Changes[i].Message; m >= 0 && m < len(p.opt.Seqs) {
			p.report.Changes[i].Seq = p.opt.Seqs[m]
		}
	}
}
