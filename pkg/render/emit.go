package render

import (
	"encoding/base64"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// What the emitters share: the message being built, merging, the image
// types each provider takes, and the thinking rule.

// out is a provider message being built: its role, its blocks (parts,
// items) and the neutral message each came from. A flat out is one
// OpenAI message or item as a whole (blocks holds it), never merged. An
// incremental rendering starts with the last message of the prefix it
// keeps, when the format merges: cont says how many blocks of it are
// already rendered, and blocks holds only the ones merged into it since.
type out struct {
	role   string
	blocks []any
	srcs   []int
	flat   bool
	cont   int
}

// outList builds a list of provider messages, merging a message into the
// one before it when the provider wants runs of one role merged. base is
// the index in the body of msgs[0]: 0, except in an incremental rendering.
type outList struct {
	p     *plan
	merge bool
	msgs  []*out
	base  int
}

// add appends blocks from neutral message src under role.
func (l *outList) add(role string, src int, blocks ...any) {
	srcs := make([]int, len(blocks))
	for i := range srcs {
		srcs[i] = src
	}
	l.addFrom(role, srcs, blocks)
}

// addFrom appends blocks, each from the neutral message in srcs.
func (l *outList) addFrom(role string, srcs []int, blocks []any) {
	if len(blocks) == 0 {
		return
	}
	if n := len(l.msgs); n > 0 && l.merge && l.msgs[n-1].role == role {
		last := l.msgs[n-1]
		if last.srcs[len(last.srcs)-1] != srcs[0] {
			l.p.change(Change{Kind: MessagesMerged, Message: srcs[0], Block: -1, Into: last.srcs[len(last.srcs)-1]})
		}
		last.blocks = append(last.blocks, blocks...)
		last.srcs = append(last.srcs, srcs...)
		return
	}
	l.msgs = append(l.msgs, &out{role: role, blocks: blocks, srcs: srcs})
}

// addFlat appends a whole message or item from neutral message src.
func (l *outList) addFlat(role string, src int, m *record.Map) {
	l.msgs = append(l.msgs, &out{role: role, blocks: []any{m}, srcs: []int{src}, flat: true})
}

// lastRole is the role of the list's last message, "" for none.
func (l *outList) lastRole() string {
	if len(l.msgs) == 0 {
		return ""
	}
	return l.msgs[len(l.msgs)-1].role
}

// values returns the flat messages or items, for the body.
func (l *outList) values() []any {
	vs := make([]any, len(l.msgs))
	for i, m := range l.msgs {
		vs[i] = m.blocks[0]
	}
	return vs
}

// containers returns the merged messages as maps of role and key.
func (l *outList) containers(key string) []any {
	vs := make([]any, len(l.msgs))
	for i, m := range l.msgs {
		vs[i] = record.NewMap("role", m.role, key, m.blocks)
	}
	return vs
}

// leadingSystem returns the text parts of the system messages before any
// other message, and how many items they are.
func (p *plan) leadingSystem() (parts []part, n int) {
	for n < len(p.items) && p.items[n].kind == systemItem {
		it := p.items[n]
		if len(it.parts) == 0 {
			p.removed(MessageRemoved, it.src, -1, "empty")
		}
		for _, pt := range it.parts {
			if pt.kind == textPart {
				parts = append(parts, pt)
			}
		}
		n++
	}
	return parts, n
}

// systemText is a later system message's text, sent as user text where
// the provider has system instructions only at the start: marked, so the
// model can tell it from the user's words.
func systemText(t string) string { return "<system>\n" + t + "\n</system>" }

// imageOK reports whether the provider takes images of type mime: the
// types each provider documents.
func (pv *provider) imageOK(mime string) bool {
	switch mime {
	case "image/jpeg", "image/png", "image/gif", "image/webp":
		return true
	case "image/heic", "image/heif":
		return pv.heif
	}
	return false
}

// imageRefused says why the plan's format does not take an image; "" when
// it does.
func (p *plan) imageRefused(img image) string {
	switch {
	case img.url != "" && p.pv.noImageURL != "":
		return p.pv.noImageURL
	case img.url == "" && !p.pv.imageOK(img.mime):
		return "image of type " + quote(img.mime)
	}
	return ""
}

// imageFor checks an image part for the plan's format, reporting it when
// it goes.
func (p *plan) imageFor(pt part, src, block int) bool {
	if reason := p.imageRefused(pt.img); reason != "" {
		p.removed(BlockRemoved, src, block, reason)
		return false
	}
	return true
}

// sent reports whether a part of a user or system message is sent: text,
// or an image the format takes.
func (p *plan) sent(pt part) bool {
	switch pt.kind {
	case textPart:
		return true
	case imagePart:
		return p.imageRefused(pt.img) == ""
	}
	return false
}

// contentParts renders the text and image parts of a message or result
// of neutral message src, in order: each text through text, each image the
// format takes through img; an image it does not take is reported removed
// at its block. A nil constructor leaves that kind out (sent elsewhere).
func (p *plan) contentParts(parts []part, src int, text func(string) any, img func(image) any) []any {
	var out []any
	for _, pt := range parts {
		switch pt.kind {
		case textPart:
			if text != nil {
				out = append(out, text(pt.text))
			}
		case imagePart:
			if img != nil && p.imageFor(pt, src, pt.block) {
				out = append(out, img(pt.img))
			}
		}
	}
	return out
}

// systemAsUser lays out a system message past the leading system text
// as a user message, its texts made by text: the formats that take
// system text only at the start. A system message of no text is removed.
func (p *plan) systemAsUser(l *outList, it *item, text func(string) any) {
	var blocks []any
	for _, pt := range it.parts {
		blocks = append(blocks, text(systemText(pt.text)))
	}
	if len(blocks) == 0 {
		p.removed(MessageRemoved, it.src, -1, "empty")
		return
	}
	p.change(Change{Kind: SystemAsUser, Message: it.src, Block: -1})
	l.add("user", it.src, blocks...)
}

// userMessage lays out a user message as its content parts
// (contentParts). One left with none is removed, unless it held tool
// results, which go out on their own.
func (p *plan) userMessage(l *outList, it *item, text func(string) any, img func(image) any) {
	blocks := p.contentParts(it.parts, it.src, text, img)
	if len(blocks) == 0 {
		if len(it.parts) > 0 || !p.onlyResults(it.src) {
			p.removed(MessageRemoved, it.src, -1, "empty")
		}
		return
	}
	l.add("user", it.src, blocks...)
}

// onlyResults reports whether neutral message i held tool results: a user
// message left with no content of its own is then not worth reporting.
func (p *plan) onlyResults(i int) bool {
	for _, r := range p.results {
		if r.src == i {
			return true
		}
	}
	return false
}

// textBlock is Anthropic's and Chat Completions' text block.
func textBlock(t string) any { return record.NewMap("type", "text", "text", t) }

func dataURL(img image) string {
	if img.url != "" {
		return img.url
	}
	return "data:" + img.mime + ";base64," + img.data
}

// sameProvider reports whether an assistant message was produced through
// an API whose name holds one of the words, or names none: pi records api
// and provider on its assistant messages. Signatures are only valid where
// they were made.
func sameProvider(m *record.Map, words ...string) bool {
	for _, k := range []string{"api", "provider"} {
		v, ok := m.String(k)
		if !ok || v == "" {
			continue
		}
		v = strings.ToLower(v)
		for _, w := range words {
			if strings.Contains(v, w) {
				return true
			}
		}
		return false
	}
	return true
}

// validBase64 reports whether s is standard base64, as Gemini's bytes
// fields need.
func validBase64(s string) bool {
	_, err := base64.StdEncoding.DecodeString(s)
	return err == nil && s != ""
}

// joinText joins text parts with a blank line.
func joinText(parts []part) (string, int) {
	var b strings.Builder
	n := 0
	for _, pt := range parts {
		if pt.kind != textPart {
			continue
		}
		if n > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(pt.text)
		n++
	}
	return b.String(), n
}

// resultText is a result's text blocks joined by newlines.
func resultText(r *result) string {
	var b strings.Builder
	n := 0
	for _, pt := range r.parts {
		if pt.kind == textPart {
			if n > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(pt.text)
			n++
		}
	}
	return b.String()
}

func hasImages(r *result) bool {
	for _, pt := range r.parts {
		if pt.kind == imagePart {
			return true
		}
	}
	return false
}

// isBrowserResult reports whether r answers a browser call and holds an
// image.
func isBrowserResult(r *result, browser map[string]bool) bool {
	return r.call != nil && browser[r.call.name] && hasImages(r)
}

// object returns call arguments as an object: a map as it is, a string
// holding a JSON object decoded, nothing as {}; anything else is wrapped
// as {"rawInvalidInput": value} and reported.
func (p *plan) object(c *call) *record.Map {
	switch a := c.args.(type) {
	case *record.Map:
		return a
	case nil:
		return record.NewMap()
	case string:
		if v, err := record.DecodeJSON([]byte(a)); err == nil {
			if m, ok := v.(*record.Map); ok {
				return m
			}
		}
	}
	p.change(Change{Kind: ArgsWrapped, Message: c.src, Block: c.block, ID: c.id})
	return record.NewMap("rawInvalidInput", c.args)
}

// argString returns call arguments as the JSON string OpenAI takes: a
// string as it is, anything else encoded (a value that is not an object
// wrapped as object does).
func (p *plan) argString(c *call) string {
	if s, ok := c.args.(string); ok {
		return s
	}
	b, err := record.AppendJSON(nil, p.object(c))
	if err != nil {
		return "{}"
	}
	return string(b)
}
