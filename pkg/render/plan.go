package render

import (
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
