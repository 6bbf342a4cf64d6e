package render

import (
	"math"

	"github.com/ctxd/ctxd/pkg/record"
)

// movedImageText stands in a tool message for the images that moved to
// the user message after the tool messages.
const movedImageText = "[image in the next user message]"

// openAIChatProvider renders {"messages": [...]} for Chat Completions:
// system messages as system messages where they are, each assistant
// message with tool_calls followed by one tool message per call, in call
// order, and then one user message with the results' images, which tool
// messages cannot hold.
var openAIChatProvider = &provider{
	format:   OpenAIChat,
	out:      func(p *plan) (any, *outList, [2]int) { return nil, p.openAIChatOut(), [2]int{-1, -1} },
	messages: "messages",
	// Chat Completions has refused ids over 40 characters.
	idMax:       40,
	imageTokens: openAIImageTokens,
}

// openAIImageTokens: 85 + 170 per 512 px tile after fitting in 2048x2048
// and scaling the short side to 768.
func openAIImageTokens(w, h int) int {
	fw, fh := float64(w), float64(h)
	if s := 2048 / math.Max(fw, fh); s < 1 {
		fw, fh = fw*s, fh*s
	}
	if s := 768 / math.Min(fw, fh); s < 1 {
		fw, fh = fw*s, fh*s
	}
	tiles := math.Ceil(fw/512) * math.Ceil(fh/512)
	return 85 + 170*int(tiles)
}

func (p *plan) openAIChatOut() *outList {
	l := p.outList(false)
	add := func(src int, m *record.Map) {
		role, _ := m.String("role")
		l.addFlat(role, src, m)
	}
	for _, it := range p.items {
		p.mark(l, it.src, true, [2]int{-1, -1})
		switch it.kind {
		case systemItem, userItem:
			role := "user"
			if it.kind == systemItem {
				role = "system"
			}
			content := p.chatContent(it)
			if content == nil {
				if len(it.parts) > 0 || !p.onlyResults(it.src) {
					p.removed(MessageRemoved, it.src, -1, "empty")
				}
				continue
			}
			add(it.src, record.NewMap("role", role, "content", content))
		case assistantItem:
			var texts []part
			var calls []any
			for _, pt := range it.parts {
				switch pt.kind {
				case textPart:
					texts = append(texts, pt)
				case callPart:
					c := pt.call
					calls = append(calls, record.NewMap("id", c.wire, "type", "function",
						"function", record.NewMap("name", c.tool, "arguments", p.argString(c))))
				case thinkingPart, redactedPart:
					p.removed(BlockRemoved, it.src, pt.block, "thinking (Chat Completions takes none back)")
				}
			}
			if len(texts) == 0 && len(calls) == 0 {
				p.removed(MessageRemoved, it.src, -1, "empty")
				continue
			}
			m := record.NewMap("role", "assistant")
			switch {
			case len(texts) == 0:
				m.Set("content", nil)
			case len(texts) == 1 && it.stringContent:
				m.Set("content", texts[0].text)
			default:
				m.Set("content", textParts(texts, "text"))
			}
			if len(calls) > 0 {
				m.Set("tool_calls", calls)
			}
			add(it.src, m)
		case resultsItem:
			var images []any
			for _, r := range it.results {
				var texts []part
				for _, pt := range r.parts {
					if pt.kind == textPart {
						texts = append(texts, pt)
					}
				}
				imgs := p.contentParts(r.parts, r.src, nil, chatImage)
				label := len(imgs) > 0
				if label {
					images = append(images, textBlock("Images from tool result "+r.call.wire+":"))
					images = append(images, imgs...)
					p.change(Change{Kind: ImageMoved, Message: r.src, Block: r.block, ID: r.id})
				}
				var content any
				switch {
				case len(texts) == 0 && label:
					content = movedImageText
				case len(texts) == 0:
					content = ""
				case r.stringContent:
					content = texts[0].text
				default:
					content = textParts(texts, "text")
				}
				add(r.src, record.NewMap("role", "tool", "tool_call_id", r.call.wire, "content", content))
			}
			if len(images) > 0 {
				add(it.src, record.NewMap("role", "user", "content", images))
			}
		}
	}
	p.mark(l, len(p.msgs), true, [2]int{-1, -1})
	return l
}

// chatContent is a user or system message's content: a string when the
// neutral content was one, else text and image parts (a system message
// has no image: extraction takes images in user messages only); nil when
// nothing is left.
func (p *plan) chatContent(it *item) any {
	if it.stringContent && len(it.parts) == 1 {
		return it.parts[0].text
	}
	if parts := p.contentParts(it.parts, it.src, textBlock, chatImage); len(parts) > 0 {
		return parts
	}
	return nil
}

func chatImage(img image) any {
	return record.NewMap("type", "image_url", "image_url", record.NewMap("url", dataURL(img)))
}

func textParts(texts []part, typ string) []any {
	out := make([]any, len(texts))
	for i, pt := range texts {
		out[i] = record.NewMap("type", typ, "text", pt.text)
	}
	return out
}

// openAIResponsesProvider renders {"input": [...]} for the Responses
// API: message items for user, system and assistant text, a function_call
// item per call and a function_call_output item per result right after
// its call's items, in call order. Item ids are never sent: they must
// come from the same API, and an omitted id is always valid.
var openAIResponsesProvider = &provider{
	format:   OpenAIResponses,
	out:      func(p *plan) (any, *outList, [2]int) { return nil, p.openAIResponsesOut(), [2]int{-1, -1} },
	messages: "input",
	// call_id allows 64.
	idMax:       64,
	imageTokens: openAIImageTokens,
}

// openAIResponsesOut builds the items, each under the role of the
// message it came from ("tool" for outputs).
func (p *plan) openAIResponsesOut() *outList {
	l := p.outList(false)
	for _, it := range p.items {
		p.mark(l, it.src, true, [2]int{-1, -1})
		switch it.kind {
		case systemItem, userItem:
			role := "user"
			if it.kind == systemItem {
				role = "system"
			}
			var content any
			if it.stringContent && len(it.parts) == 1 {
				content = it.parts[0].text
			} else if parts := p.contentParts(it.parts, it.src, inputText, responsesImage); len(parts) > 0 {
				content = parts // a system message has text parts only
			}
			if content == nil {
				if len(it.parts) > 0 || !p.onlyResults(it.src) {
					p.removed(MessageRemoved, it.src, -1, "empty")
				}
				continue
			}
			l.addFlat(role, it.src, record.NewMap("type", "message", "role", role, "content", content))
		case assistantItem:
			n := len(l.msgs)
			for _, pt := range it.parts {
				switch pt.kind {
				case textPart:
					l.addFlat("assistant", it.src, record.NewMap("type", "message", "role", "assistant", "content", pt.text))
				case callPart:
					c := pt.call
					l.addFlat("assistant", it.src, record.NewMap("type", "function_call", "call_id", c.wire, "name", c.tool, "arguments", p.argString(c)))
				case thinkingPart, redactedPart:
					p.removed(BlockRemoved, it.src, pt.block, "thinking (a reasoning item needs its encrypted content and id)")
				}
			}
			if len(l.msgs) == n {
				p.removed(MessageRemoved, it.src, -1, "empty")
				continue
			}
		case resultsItem:
			for _, r := range it.results {
				var output any = ""
				if r.stringContent && len(r.parts) == 1 {
					output = r.parts[0].text
				} else if parts := p.contentParts(r.parts, r.src, inputText, responsesImage); len(parts) > 0 {
					output = parts
				}
				l.addFlat("tool", r.src, record.NewMap("type", "function_call_output", "call_id", r.call.wire, "output", output))
			}
		}
	}
	p.mark(l, len(p.msgs), true, [2]int{-1, -1})
	return l
}

func inputText(t string) any { return record.NewMap("type", "input_text", "text", t) }

func responsesImage(img image) any {
	return record.NewMap("type", "input_image", "image_url", dataURL(img), "detail", "auto")
}
