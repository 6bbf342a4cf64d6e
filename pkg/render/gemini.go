package render

import (
	"math"
	"slices"

	"github.com/ctxd/ctxd/pkg/record"
)

// geminiProvider renders {"systemInstruction": {...} (only if any),
// "contents": [...]} for generateContent: runs of one role merged, each
// model turn with calls followed by a user turn whose first parts are the
// function responses, one per call, in call order, and then the results'
// images.
var geminiProvider = &provider{
	format:   Gemini,
	out:      geminiBody,
	system:   "systemInstruction",
	messages: "contents",
	blocks:   "parts",
	userTurn: true,
	// Gemini takes any id; 64 keeps them readable.
	idMax:       64,
	nameLetter:  true,
	heif:        true,
	noImageURL:  "image by URL (Gemini takes inline images)",
	imageTokens: geminiImageTokens,
}

func geminiBody(p *plan) (any, *outList, [2]int) {
	sys, l := p.geminiOut()
	if len(sys) > 0 {
		return geminiSystem(sys), l, [2]int{-1, -1}
	}
	return nil, l, [2]int{-1, -1}
}

// geminiImageTokens: 258 up to 384x384, else 258 per 768x768 tile.
func geminiImageTokens(w, h int) int {
	if w <= 384 && h <= 384 {
		return 258
	}
	return 258 * int(math.Ceil(float64(w)/768)*math.Ceil(float64(h)/768))
}

func geminiSystem(sys []part) *record.Map {
	parts := make([]any, len(sys))
	for i, pt := range sys {
		parts[i] = record.NewMap("text", pt.text)
	}
	return record.NewMap("parts", parts)
}

// geminiOut builds the leading system text and the turns.
func (p *plan) geminiOut() (sys []part, l *outList) {
	l = p.outList(true)
	items := p.items
	if p.from == nil {
		var n int
		sys, n = p.leadingSystem()
		items = p.items[n:]
		p.geminiFirstCalls(items)
	} else {
		p.userTurn = true // a checkpoint is only taken after one
	}
	for k, it := range items {
		p.mark(l, it.src, k > 0, [2]int{-1, -1})
		switch it.kind {
		case systemItem:
			p.userTurn = p.userTurn || slices.ContainsFunc(it.parts, p.sent)
			p.systemAsUser(l, it, geminiText)
		case userItem:
			p.userTurn = p.userTurn || slices.ContainsFunc(it.parts, p.sent)
			p.userMessage(l, it, geminiText, geminiImage)
		case assistantItem:
			var parts []any
			sign := sameProvider(it.msg, "google", "gemini", "vertex")
			for _, pt := range it.parts {
				switch pt.kind {
				case textPart:
					parts = append(parts, record.NewMap("text", pt.text))
				case callPart:
					c := pt.call
					part := record.NewMap("functionCall", record.NewMap("id", c.wire, "name", c.tool, "args", p.object(c)))
					switch {
					case c.thoughtSig == "":
					case sign && validBase64(c.thoughtSig):
						part.Set("thoughtSignature", c.thoughtSig)
					default:
						p.removed(BlockRemoved, it.src, pt.block, "thought signature not valid here")
					}
					parts = append(parts, part)
				case thinkingPart, redactedPart:
					p.removed(BlockRemoved, it.src, pt.block, "thinking (Gemini keeps thought signatures on the parts they came on)")
				}
			}
			if len(parts) == 0 {
				p.removed(MessageRemoved, it.src, -1, "empty")
				continue
			}
			l.add("model", it.src, parts...)
		case resultsItem:
			var parts, images []any
			var srcs, imageSrcs []int
			for _, r := range it.results {
				srcs = append(srcs, r.src)
				key := "output"
				if r.isErr {
					key = "error"
				}
				parts = append(parts, record.NewMap("functionResponse", record.NewMap(
					"id", r.call.wire, "name", r.call.tool, "response", record.NewMap(key, resultText(r)))))
				if imgs := p.contentParts(r.parts, r.src, nil, geminiImage); len(imgs) > 0 {
					images = append(images, imgs...)
					for range imgs {
						imageSrcs = append(imageSrcs, r.src)
					}
					p.change(Change{Kind: ImageMoved, Message: r.src, Block: r.block, ID: r.id})
				}
			}
			l.addFrom("user", append(srcs, imageSrcs...), append(parts, images...))
		}
	}
	p.mark(l, len(p.msgs), len(items) > 0, [2]int{-1, -1})
	return sys, l
}

// geminiFirstCalls removes the calls of model turns that no user turn
// precedes: Gemini refuses a function call turn that does not come right
// after a user turn or a function response turn, and a context that a
// compaction starts with the assistant has none before it. A user turn
// counts by what of it is sent: one left with no part (its only image of
// a type Gemini refuses, say) precedes nothing. Their results go with
// them.
func (p *plan) geminiFirstCalls(items []*item) {
	for k, it := range items {
		if it.kind == userItem || it.kind == systemItem {
			if slices.ContainsFunc(it.parts, p.sent) {
				return
			}
			continue
		}
		if it.kind != assistantItem {
			continue
		}
		kept := it.parts[:0:0]
		removed := false
		for _, pt := range it.parts {
			if pt.kind == callPart {
				c := pt.call
				p.change(Change{Kind: CallRemoved, Message: c.src, Block: c.block, ID: c.id, Reason: "a function call turn must follow a user turn"})
				p.change(Change{Kind: ResultRemoved, Message: c.res.src, Block: c.res.block, ID: c.id, Reason: "its call is removed"})
				removed = true
				continue
			}
			kept = append(kept, pt)
		}
		it.parts = kept
		if removed && k+1 < len(items) && items[k+1].kind == resultsItem {
			items[k+1].results = nil
		}
	}
}

func geminiText(t string) any { return record.NewMap("text", t) }

func geminiImage(img image) any {
	return record.NewMap("inlineData", record.NewMap("mimeType", img.mime, "data", img.data))
}
