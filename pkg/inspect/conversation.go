package inspect

import (
	"fmt"
	"slices"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// Bounds of the conversation view: the context as the model sees it,
// newest last. A context of thousands of messages shows its latest
// convItems entries, within a share of PageBytes; the rest is a link to
// the context as JSON.
const (
	convItems  = 100  // entries shown
	convText   = 2000 // bytes of one text block
	convJSON   = 1500 // bytes of an entry's JSON, one click away
	convParts  = 50   // blocks of a message shown, and calls
	convName   = 100  // bytes of a role, a tool's name, a call's id
	convMarkup = 200  // bytes a block's markup takes, beside its text
)

// convItem is an entry of the conversation view: a context message, a
// record that gave none (dropped, replaced, rejected), or the divider of
// a compaction.
type convItem struct {
	Kind   string // "message", "removed" or "divider"
	Seq    uint64 // the stored record it comes from
	Index  int    // in View.Messages; -1 for none
	Role   string
	Class  string
	Status projection.Status
	Rule   string
	Blocks []convBlock
	Pairs  []convPair
	JSON   string // the context entry's JSON, cut; "" for a removed record
	Record string // the stored record's raw path
	Size   int
}

// convBlock is a piece of a message for people.
type convBlock struct {
	Kind string // "text", "image", "omitted" (an image the model is not sent), "other"
	Text string
	Src  string // an image's thumbnail
	Rule string // why an omitted image is not sent
}

// convPair is a tool call beside its result, paired by id.
type convPair struct {
	ID, Tool string
	Args     string
	Result   []convBlock
	Answered bool
	ResultAt uint64 // the stored record of the result
	ResultIx int    // in View.Messages
	// The fate of the result's record: a trimmed screenshot says so.
	ResultStatus projection.Status
	ResultRule   string
	Error        bool
}

// callRef is a call found in a context message.
type callRef struct {
	id, tool string
	args     any
}

// callsOf lists the calls of an assistant message (section 3 of
// docs/CONTEXT.md): call blocks of its content and tool_calls entries.
func callsOf(m *record.Map) []callRef {
	if role, _ := m.String("role"); role != "assistant" {
		return nil
	}
	var out []callRef
	if c, ok := m.Get("content"); ok {
		if arr, ok := c.([]any); ok {
			for _, e := range arr {
				b, ok := e.(*record.Map)
				if !ok || !isCall(b) {
					continue
				}
				name, _ := b.String("name")
				args, _ := b.Get("arguments")
				if args == nil {
					args, _ = b.Get("input")
				}
				out = append(out, callRef{id: firstString(b, "id", "toolCallId", "tool_call_id", "tool_call_id$"), tool: name, args: args})
			}
		}
	}
	if tc, ok := m.Get("tool_calls"); ok {
		arr, _ := tc.([]any)
		for _, e := range arr {
			b, ok := e.(*record.Map)
			if !ok {
				continue
			}
			name, _ := b.String("name")
			var args any
			if f, ok := b.Get("function"); ok {
				if fm, ok := f.(*record.Map); ok {
					if n, ok := fm.String("name"); ok {
						name = n
					}
					args, _ = fm.Get("arguments")
				}
			}
			id, _ := b.String("id")
			out = append(out, callRef{id: id, tool: name, args: args})
		}
	}
	return out
}

func isCall(b *record.Map) bool {
	t, _ := b.String("type")
	return t == "toolCall" || t == "tool_use" || t == "tool_call"
}

func firstString(m *record.Map, keys ...string) string {
	for _, k := range keys {
		if s, ok := m.String(k); ok {
			return s
		}
	}
	return ""
}

// resultID is the id of a result message, "" when m is none.
func resultID(m *record.Map) string {
	if role, _ := m.String("role"); role != "toolResult" && role != "tool" {
		return ""
	}
	return firstString(m, "toolCallId", "tool_call_id", "tool_call_id$")
}

// conversation makes the conversation view of an explained view: every
// record in order, as the context messages it gives or, when it gives
// none, marked with its fate and rule; compactions as dividers; each
// call beside its result. It shows the latest convItems entries within
// budget bytes, and returns how many entries it left out before them.
func conversation(v *View, base string, budget int) (items []convItem, hidden int) {
	if v.Cut != "" {
		return nil, 0
	}
	// Which record gives each message, and where each image of a record
	// has its thumbnail.
	owner := make([]int, len(v.Messages))
	thumbs := map[*record.Map]string{}
	for i, row := range v.Rows {
		for k := range row.Messages {
			if j := row.First + k; j < len(owner) {
				owner[j] = i
			}
		}
		n := 0
		walkImages(row.Value, func(blk *record.Map, _ inline) {
			thumbs[blk] = fmt.Sprintf("%s/images/%d/%d", base, row.Seq, n)
			n++
		})
	}
	// A call's first result after it, shown beside the call rather than
	// on its own.
	calls := map[string]int{}  // id -> message of its first call
	paired := map[string]int{} // id -> message of its first result after the call
	for j, msg := range v.Messages {
		m, ok := msg.(*record.Map)
		if !ok {
			continue
		}
		for _, c := range callsOf(m) {
			if _, seen := calls[c.id]; !seen && c.id != "" {
				calls[c.id] = j
			}
		}
		if id := resultID(m); id != "" {
			if _, seen := paired[id]; !seen {
				if _, called := calls[id]; called {
					paired[id] = j
				}
			}
		}
	}
	beside := map[int]int{} // result message -> its call's message
	for id, j := range paired {
		beside[j] = calls[id]
	}

	// The entries, in order, before any is rendered: a row of what to show.
	type entry struct {
		row, msg int // msg -1: the record itself
		divider  bool
	}
	var entries []entry
	entryOf := make([]int, len(v.Messages))
	for i, row := range v.Rows {
		if row.Class == "compaction" {
			entries = append(entries, entry{row: i, msg: -1, divider: true})
		}
		if row.Messages == 0 {
			if row.Class != "compaction" {
				entries = append(entries, entry{row: i, msg: -1})
			}
			continue
		}
		for k := range row.Messages {
			entryOf[row.First+k] = len(entries)
			entries = append(entries, entry{row: i, msg: row.First + k})
		}
	}

	start := max(len(entries)-convItems, 0)
	skipped := 0
	for e := len(entries) - 1; e >= start && budget > 0; e-- {
		en := entries[e]
		if c, ok := beside[en.msg]; ok && en.msg >= 0 && entryOf[c] >= start {
			skipped++
			continue // shown beside its call
		}
		row := v.Rows[en.row]
		it := convItem{Seq: row.Seq, Index: en.msg, Class: cut(row.Class, convName), Status: row.Status, Rule: cut(row.Rule, convText),
			Record: fmt.Sprintf("%s/records/%d", base, row.Seq), Size: row.Size}
		switch {
		case en.divider:
			it.Kind = "divider"
		case en.msg < 0:
			it.Kind = "removed"
			if row.Value != nil {
				it.Blocks = []convBlock{{Kind: "text", Text: oneLine(row.Value, 200)}}
			}
		default:
			it.Kind = "message"
			msg := v.Messages[en.msg]
			m, _ := msg.(*record.Map)
			if m != nil {
				it.Role, _ = m.String("role")
				it.Role = cut(it.Role, convName)
				content, _ := m.Get("content")
				it.Blocks = blocksOf(content, thumbs, &budget)
				calls := callsOf(m)
				for n, c := range calls {
					if n == convParts || budget <= 0 {
						it.Blocks = append(it.Blocks, convBlock{Kind: "more", Text: fmt.Sprintf("…[%d more calls: open the JSON or the stored record]", len(calls)-n)})
						break
					}
					budget -= convMarkup
					p := convPair{ID: cut(c.id, convName), Tool: cut(c.tool, convName)}
					if c.args != nil {
						p.Args = preview(c.args, min(convText, max(budget, 0)))
						budget -= len(p.Args)
					}
					if j, ok := paired[c.id]; ok && j > en.msg {
						rm := v.Messages[j].(*record.Map) // resultID found it a map
						rc, _ := rm.Get("content")
						p.Answered, p.ResultIx, p.ResultAt = true, j, v.Rows[owner[j]].Seq
						p.Result = blocksOf(rc, thumbs, &budget)
						rrow := v.Rows[owner[j]]
						p.ResultStatus, p.ResultRule = rrow.Status, cut(rrow.Rule, convText)
						if rule, ok := v.Edited[j]; ok {
							p.ResultStatus, p.ResultRule = StatusEdited, rule
						}
						if rrow.ImagesOmitted > 0 && j == rrow.First {
							p.Result = append(p.Result, omitted(rrow, v.Messages, thumbs, &budget)...)
						}
						isErr, _ := rm.Get("isError")
						p.Error = isErr == true
					}
					it.Pairs = append(it.Pairs, p)
				}
			} else {
				it.Blocks = []convBlock{{Kind: "other", Text: preview(msg, min(convText, max(budget, 0)))}}
			}
			// The images of the record the rules left out (a trimmed
			// screenshot): shown greyed, with the rule.
			if row.ImagesOmitted > 0 && en.msg == row.First {
				it.Blocks = append(it.Blocks, omitted(row, v.Messages, thumbs, &budget)...)
			}
			if rule, ok := v.Edited[en.msg]; ok {
				it.Status, it.Rule = StatusEdited, rule
			}
			it.JSON = preview(msg, min(convJSON, max(budget, 0)))
			budget -= len(it.JSON)
		}
		budget -= 200 // the markup around it
		items = append(items, it)
	}
	slices.Reverse(items)
	return items, len(entries) - len(items) - skipped
}

// omitted returns greyed thumbnails of a record's images that are not in
// the context, once, on the first message the record gives.
func omitted(row Row, messages []any, thumbs map[*record.Map]string, budget *int) []convBlock {
	in := imagesIn(messages[row.First : row.First+row.Messages])
	var out []convBlock
	more := 0
	walkImages(row.Value, func(blk *record.Map, _ inline) {
		switch {
		case in[blk]:
		case len(out) == convParts || *budget <= 0:
			more++
		default:
			*budget -= convMarkup
			out = append(out, convBlock{Kind: "omitted", Src: thumbs[blk], Rule: "section 5: an earlier browser screenshot, replaced in the context by the notice"})
		}
	})
	if more > 0 {
		out = append(out, convBlock{Kind: "more", Text: fmt.Sprintf("…[%d more images not sent: open the stored record]", more)})
	}
	return out
}

// blocksOf renders a message's content: text cut to convText, images as
// thumbnails, other blocks as cut JSON; budget is lowered by the text
// kept.
func blocksOf(content any, thumbs map[*record.Map]string, budget *int) []convBlock {
	text := func(s string) convBlock {
		s = cut(s, min(convText, max(*budget, 0)))
		*budget -= len(s) + convMarkup
		return convBlock{Kind: "text", Text: s}
	}
	switch x := content.(type) {
	case nil:
		return nil
	case string:
		return []convBlock{text(x)}
	case []any:
		var out []convBlock
		for i, e := range x {
			if len(out) == convParts || *budget <= 0 {
				out = append(out, convBlock{Kind: "more", Text: fmt.Sprintf("…[%d more blocks: open the JSON or the stored record]", len(x)-i)})
				break
			}
			b, ok := e.(*record.Map)
			if !ok {
				out = append(out, text(preview(e, convText)))
				continue
			}
			if isCall(b) {
				continue // shown beside its result
			}
			if _, isImg := imageOf(b); isImg {
				*budget -= convMarkup
				out = append(out, convBlock{Kind: "image", Src: thumbs[b]})
				continue
			}
			switch t, _ := b.String("type"); t {
			case "text":
				s, _ := b.String("text")
				out = append(out, text(s))
			case "thinking":
				s, _ := b.String("thinking")
				blk := text(s)
				blk.Kind = "thinking"
				out = append(out, blk)
			default:
				blk := text(preview(b, convText))
				blk.Kind = "other"
				out = append(out, blk)
			}
		}
		return out
	}
	return []convBlock{text(preview(content, convText))}
}

// bytes is about what the item's text takes on a page.
func (it convItem) bytes() int {
	n := len(it.JSON) + len(it.Rule) + 200
	for _, b := range it.Blocks {
		n += len(b.Text)
	}
	for _, p := range it.Pairs {
		n += len(p.Args)
		for _, b := range p.Result {
			n += len(b.Text)
		}
	}
	return n
}
