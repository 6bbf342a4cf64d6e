package render

import (
	"math"

	"github.com/ctxd/ctxd/pkg/record"
)

// anthropicProvider renders {"system": [text blocks] (only if any),
// "messages": [...]} for the Messages API, and the report's
// cache_breakpoint. RENDER.md lists the rules and the errors they prevent.
var anthropicProvider = &provider{
	format:   Anthropic,
	out:      anthropicBody,
	system:   "system",
	messages: "messages",
	blocks:   "content",
	// Anthropic's pattern allows 64.
	breakpoint:  true,
	idMax:       64,
	imageTokens: anthropicImageTokens,
}

func anthropicBody(p *plan) (any, *outList, [2]int) {
	system, l, shot := p.anthropicOut()
	if len(system) > 0 {
		return system, l, shot
	}
	return nil, l, shot
}

// anthropicImageTokens: w*h/750 after scaling to at most 1568 px a side
// and 1.15 megapixels.
func anthropicImageTokens(w, h int) int {
	fw, fh := float64(w), float64(h)
	s := math.Min(1, 1568/math.Max(fw, fh))
	s = math.Min(s, math.Sqrt(1.15e6/(fw*fh)))
	return int(math.Ceil(fw * s * fh * s / 750))
}

// anthropicOut builds the system blocks and the messages, and finds the
// latest browser screenshot: its message (an index in the body) and
// block, or -1s.
func (p *plan) anthropicOut() (system []any, l *outList, shot [2]int) {
	browser := browserSet(p.opt.BrowserTools)
	l = p.outList(true)
	shot = [2]int{-1, -1}
	items := p.items
	if p.from != nil {
		shot = p.from.shot
	} else {
		sys, n := p.leadingSystem()
		for _, pt := range sys {
			system = append(system, record.NewMap("type", "text", "text", pt.text))
		}
		items = p.items[n:]
	}
	for k, it := range items {
		p.mark(l, it.src, k > 0, shot)
		switch it.kind {
		case systemItem:
			p.systemAsUser(l, it, textBlock)
		case userItem:
			p.userMessage(l, it, textBlock, anthropicImage)
		case assistantItem:
			blocks := p.anthropicAssistant(it)
			if len(blocks) == 0 {
				p.removed(MessageRemoved, it.src, -1, "empty")
				continue
			}
			l.add("assistant", it.src, blocks...)
		case resultsItem:
			var blocks []any
			var srcs []int
			for _, r := range it.results {
				srcs = append(srcs, r.src)
				b := record.NewMap("type", "tool_result", "tool_use_id", r.call.wire)
				if content := p.contentParts(r.parts, r.src, textBlock, anthropicImage); len(content) > 0 {
					b.Set("content", content)
				}
				if r.isErr {
					b.Set("is_error", true)
				}
				if isBrowserResult(r, browser) {
					shot = [2]int{l.base + len(l.msgs), len(blocks)} // a results item starts a message
				}
				blocks = append(blocks, b)
			}
			l.addFrom("user", srcs, blocks)
		}
	}
	p.mark(l, len(p.msgs), len(items) > 0, shot)
	return system, l, shot
}

func anthropicImage(img image) any {
	if img.url != "" {
		return record.NewMap("type", "image", "source", record.NewMap("type", "url", "url", img.url))
	}
	return record.NewMap("type", "image", "source", record.NewMap("type", "base64", "media_type", img.mime, "data", img.data))
}

// anthropicAssistant renders an assistant message's blocks: signed
// thinking made through Anthropic kept, text, then tool_use blocks, moved
// after the text of their segment; a message never ends on thinking.
func (p *plan) anthropicAssistant(it *item) []any {
	type blk struct {
		v     any
		kind  partKind
		block int
	}
	var segs [][]blk // segments, each ending before a thinking block
	cur := []blk{}
	sign := sameProvider(it.msg, "anthropic", "claude")
	for _, pt := range it.parts {
		switch pt.kind {
		case textPart:
			cur = append(cur, blk{record.NewMap("type", "text", "text", pt.text), textPart, pt.block})
		case callPart:
			c := pt.call
			cur = append(cur, blk{record.NewMap("type", "tool_use", "id", c.wire, "name", c.tool, "input", p.object(c)), callPart, pt.block})
		case thinkingPart, redactedPart:
			var v *record.Map
			switch {
			case !sign:
				p.removed(BlockRemoved, it.src, pt.block, "thinking signed by another provider")
			case pt.kind == redactedPart && pt.sig != "":
				v = record.NewMap("type", "redacted_thinking", "data", pt.sig)
			case pt.kind == thinkingPart && pt.sig != "" && pt.text != "":
				v = record.NewMap("type", "thinking", "thinking", pt.text, "signature", pt.sig)
			default:
				p.removed(BlockRemoved, it.src, pt.block, "thinking without a signature")
			}
			if v != nil {
				segs = append(segs, cur)
				cur = []blk{{v, pt.kind, pt.block}}
			}
		}
	}
	segs = append(segs, cur)
	var blocks []any
	var last []blk
	for _, seg := range segs {
		// Within a segment, tool_use blocks go last, in order.
		var calls []blk
		var rest []blk
		moved := false
		for _, b := range seg {
			if b.kind == callPart {
				calls = append(calls, b)
			} else {
				if len(calls) > 0 && b.kind == textPart {
					moved = true
				}
				rest = append(rest, b)
			}
		}
		if moved {
			p.change(Change{Kind: CallsReordered, Message: it.src, Block: -1})
		}
		last = append(last, rest...)
		last = append(last, calls...)
	}
	// The final block of an assistant message cannot be thinking.
	for len(last) > 0 && (last[len(last)-1].kind == thinkingPart || last[len(last)-1].kind == redactedPart) {
		p.removed(BlockRemoved, it.src, last[len(last)-1].block, "thinking last in its message")
		last = last[:len(last)-1]
	}
	for _, b := range last {
		blocks = append(blocks, b.v)
	}
	return blocks
}

// breakpoint places the cache breakpoint on the last block before the
// latest browser screenshot, which the next screenshot does not rewrite
// (CONTEXT.md pass 3 trims only the one before it); without one, on the
// last block. Thinking blocks cannot carry one. last is the body's last
// message; blocks(m) counts message m's blocks, thinking(m, b) says
// whether block b of message m is thinking.
func breakpoint(last int, blocks func(m int) int, thinking func(m, b int) bool, shot [2]int) *Breakpoint {
	m, b := last, blocks(last)-1
	if shot[0] >= 0 {
		m, b = shot[0], shot[1]-1
	}
	for m >= 0 {
		if b < 0 {
			m--
			if m >= 0 {
				b = blocks(m) - 1
			}
			continue
		}
		if !thinking(m, b) {
			return &Breakpoint{Message: m, Block: b}
		}
		b--
	}
	return nil
}

// isThinking reports whether a rendered block is a thinking block.
func isThinking(v any) bool {
	m, ok := v.(*record.Map)
	if !ok {
		return false
	}
	t, _ := m.String("type")
	return t == "thinking" || t == "redacted_thinking"
}
