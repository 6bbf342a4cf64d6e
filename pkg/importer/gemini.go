package importer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// Gemini CLI keeps a chat either as one JSON object (legacy .json files:
// sessionId, messages) or as an append-only log (.jsonl): a metadata line,
// then message records upserted by id (a message is written again whole
// each time its calls, results or tokens change), {"$set":{...}} patches,
// of which $set.messages replaces the whole history (a compression), and
// {"$rewindTo":id}, which removes that message and every later one. A
// gemini message holds its tool calls with their results.

// geminiTypes are the message types Gemini CLI records.
var geminiTypes = map[string]bool{"user": true, "gemini": true, "info": true, "error": true, "warning": true}

type gmsg struct {
	id    string
	m     *record.Map
	where string
}

// gsegment is the history between two replacements: its messages as they
// stood when it ended, and the $set.messages that ended it, if any.
type gsegment struct {
	list       []*gmsg
	reset      []any
	resetWhere string
	resetLine  int
	resetAt    any
}

type geminiParser struct {
	rep    *Report
	source string
}

func parseGemini(name string, data []byte) ([]*Transcript, error) {
	var rep Report
	p := &geminiParser{rep: &rep}
	sid := ""
	var segs []*gsegment
	whole, fix, fixLine, err := decodeWhole(data)
	m, _ := whole.(*record.Map)
	if msgs, ok := get(m, "messages").([]any); err == nil && ok {
		if fix.bytes > 0 {
			rep.approx(lineWhere(fixLine), "%s", fix)
		}
		sid = str(m, "sessionId")
		seg := &gsegment{}
		for i, v := range msgs {
			rep.Entries++
			where := fmt.Sprintf("message %d", i+1)
			mm, ok := v.(*record.Map)
			if !ok {
				rep.unknown(where, "a JSON %s, not a message", record.TypeName(v))
				continue
			}
			seg.list = append(seg.list, &gmsg{id: str(mm, "id"), m: mm, where: where})
		}
		segs = append(segs, seg)
	} else if err != nil && !jsonLines(data) {
		// One JSON value over many lines, which does not decode: say
		// where, rather than what its first line is not.
		return nil, err
	} else {
		var understood int
		segs, sid, understood, err = p.fold(data)
		if err != nil {
			return nil, err
		}
		if understood == 0 {
			return nil, noneUnderstood(&rep, Gemini)
		}
	}
	p.source = sid
	if p.source == "" {
		p.source = baseName(name)
	}
	b := newBuilder(sid, SessionID(p.source))
	b.t.Report = rep
	p.rep = b.report()
	// The history's last model message, unless a user message follows it
	// (info, error and warning messages make no records): the tool writes
	// it again as its calls, results and tokens come (Unsettled).
	var open *gmsg
	if len(segs) > 0 && segs[len(segs)-1].reset == nil {
		for _, g := range slices.Backward(segs[len(segs)-1].list) {
			if t := str(g.m, "type"); t == "user" || t == "gemini" {
				if t == "gemini" {
					open = g
				}
				break
			}
		}
	}
	covered := map[string]bool{}
	for _, seg := range segs {
		for _, g := range seg.list {
			before := len(b.t.Records)
			for _, r := range p.records(g) {
				if !covered[r.ID] {
					b.add(r.ID, r.Where, r.value)
				}
			}
			if g == open {
				b.t.Unsettled = len(b.t.Records) - before
			}
		}
		if seg.reset == nil {
			continue
		}
		// A replaced history is a compaction whose snapshot is the new list.
		c := checkpoint{format: Gemini, where: seg.resetWhere, at: seg.resetAt}
		covered = map[string]bool{}
		var snap []*record.Map
		for i, v := range seg.reset {
			mm, ok := v.(*record.Map)
			if !ok {
				continue
			}
			for _, r := range p.records(&gmsg{id: str(mm, "id"), m: mm, where: fmt.Sprintf("%s, message %d", seg.resetWhere, i+1)}) {
				covered[r.ID] = true
				snap = append(snap, r.value)
			}
		}
		c.keepAll(snapshotOf(snap))
		b.addCheckpoint(fmt.Sprintf("%s:set@%d", p.source, seg.resetLine), seg.resetWhere, c)
	}
	return []*Transcript{b.t}, nil
}

// fold replays a JSONL chat log the way Gemini CLI loads it, cutting it
// into segments at each replacement of the history.
func (p *geminiParser) fold(data []byte) (segs []*gsegment, sid string, understood int, err error) {
	rep := p.rep
	cur := &gsegment{}
	index := map[string]int{}
	first := true
	err = eachDecoded(data, rep, nil, func(n int, _ []byte, m *record.Map, _ kept) {
		where := lineWhere(n)
		isFirst := first
		first = false
		if target, ok := m.String("$rewindTo"); ok {
			understood++
			cut := len(cur.list)
			if i, ok := index[target]; ok {
				cut = i
			} else {
				cut = 0 // an unknown target clears the history, as Gemini does
			}
			for _, g := range cur.list[cut:] {
				delete(index, g.id)
				if t := str(g.m, "type"); t == "user" || t == "gemini" {
					rep.Abandoned++
				}
			}
			cur.list = cur.list[:cut]
			return
		}
		if id, ok := m.String("id"); ok && has(m, "type") {
			if typ := str(m, "type"); !geminiTypes[typ] {
				rep.unknown(where, "message type %q", typ)
				return
			}
			understood++
			g := &gmsg{id: id, m: m, where: where}
			if i, ok := index[id]; ok {
				cur.list[i] = g // a later version of the same message
			} else {
				index[id] = len(cur.list)
				cur.list = append(cur.list, g)
			}
			return
		}
		patch := mapAt(m, "$set")
		if patch == nil {
			patch = m // the metadata line
		}
		if !has(m, "$set") && !has(m, "sessionId") {
			rep.unknown(where, "neither a message, a metadata line, $set nor $rewindTo")
			return
		}
		understood++
		if s := str(patch, "sessionId"); s != "" && sid == "" {
			sid = s
		}
		if patch == m {
			rep.metadata("metadata")
		} else {
			rep.metadata("$set")
		}
		msgs, ok := get(patch, "messages").([]any)
		if !ok {
			return
		}
		if isFirst {
			// The first line's message list is the starting history.
			for i, v := range msgs {
				if mm, ok := v.(*record.Map); ok {
					index[str(mm, "id")] = len(cur.list)
					cur.list = append(cur.list, &gmsg{id: str(mm, "id"), m: mm, where: fmt.Sprintf("%s, message %d", where, i+1)})
				}
			}
			return
		}
		cur.reset, cur.resetWhere, cur.resetLine, cur.resetAt = msgs, where, n, get(patch, "lastUpdated")
		segs = append(segs, cur)
		cur = &gsegment{}
		index = map[string]int{}
		for i, v := range msgs {
			if mm, ok := v.(*record.Map); ok {
				index[str(mm, "id")] = len(cur.list)
				cur.list = append(cur.list, &gmsg{id: str(mm, "id"), m: mm, where: fmt.Sprintf("%s, message %d", where, i+1)})
			}
		}
	})
	return append(segs, cur), sid, understood, err
}

// records converts one Gemini message: a user message, or an assistant
// message followed by one tool result per call that has a result.
func (p *geminiParser) records(g *gmsg) []Record {
	id := p.source + ":" + g.id
	ts := get(g.m, "timestamp")
	switch typ := str(g.m, "type"); typ {
	case "user":
		content, results := p.parts(g, get(g.m, "content"))
		var out []Record
		if c, ok := content.([]any); !ok || len(c) > 0 {
			m := record.NewMap("role", "user", "content", content)
			setIf(m, "timestamp", ts)
			out = append(out, Record{ID: id, Where: g.where, value: m})
		}
		for i, r := range results {
			setIf(r, "timestamp", ts)
			out = append(out, Record{ID: fmt.Sprintf("%s:%s", id, resultKey(r, i)), Where: g.where, value: r})
		}
		return out
	case "gemini":
		content, results := p.parts(g, get(g.m, "content"))
		blocks, _ := content.([]any)
		if s, ok := content.(string); ok && s != "" {
			blocks = []any{textBlock(s)}
		}
		type pending struct {
			tc  *record.Map
			key string
		}
		var calls []pending
		for i, v := range arrAt(g.m, "toolCalls") {
			tc, ok := v.(*record.Map)
			if !ok {
				p.rep.unknown(g.where, "a tool call that is a JSON %s", record.TypeName(v))
				continue
			}
			call := record.NewMap("type", "toolCall")
			setIf(call, "id", get(tc, "id"))
			call.Set("name", get(tc, "name"))
			call.Set("arguments", get(tc, "args"))
			blocks = append(blocks, call)
			key := str(tc, "id")
			if key == "" {
				key = fmt.Sprintf("call%d", i+1)
			}
			calls = append(calls, pending{tc, key})
		}
		if len(blocks) == 0 && len(results) == 0 {
			p.rep.metadata("gemini (empty)")
			return nil
		}
		var out []Record
		if len(blocks) > 0 {
			m := record.NewMap("role", "assistant", "content", blocks)
			setIf(m, "model", get(g.m, "model"))
			setIf(m, "timestamp", ts)
			out = append(out, Record{ID: id, Where: g.where, value: m})
		}
		for i, r := range results {
			setIf(r, "timestamp", ts)
			out = append(out, Record{ID: fmt.Sprintf("%s:%s", id, resultKey(r, i)), Where: g.where, value: r})
		}
		for _, c := range calls {
			if r := p.result(g, c.tc); r != nil {
				out = append(out, Record{ID: id + ":" + c.key, Where: g.where, value: r})
			}
		}
		return out
	case "info", "error", "warning":
		p.rep.metadata(typ)
	default:
		p.rep.unknown(g.where, "message type %q", typ)
	}
	return nil
}

func resultKey(r *record.Map, i int) string {
	if id := str(r, "toolCallId"); id != "" {
		return id
	}
	return fmt.Sprintf("response%d", i+1)
}

// result splits a call's embedded result into a toolResult message; a call
// without a result (cancelled, or still running) gets none.
func (p *geminiParser) result(g *gmsg, tc *record.Map) *record.Map {
	res, ok := tc.Get("result")
	if !ok || res == nil {
		return nil
	}
	parts, ok := res.([]any)
	if !ok {
		parts = []any{res}
	}
	var content []any
	for _, part := range parts {
		pm, ok := part.(*record.Map)
		if !ok {
			continue
		}
		if fr := mapAt(pm, "functionResponse"); fr != nil {
			content = append(content, textBlock(responseText(get(fr, "response"))))
			continue
		}
		content = append(content, p.part(g, pm)...)
	}
	m := record.NewMap("role", "toolResult")
	setIf(m, "toolCallId", get(tc, "id"))
	m.Set("toolName", get(tc, "name"))
	if content == nil {
		content = []any{}
	}
	m.Set("content", content)
	m.Set("isError", str(tc, "status") == "error")
	setIf(m, "timestamp", get(tc, "timestamp"))
	return m
}

// responseText is the text of a function response: its output or error
// when that is all it holds, else the response as JSON.
func responseText(v any) string {
	m, ok := v.(*record.Map)
	if ok && m.Len() == 1 {
		if s, ok := m.String("output"); ok {
			return s
		}
		if s, ok := m.String("error"); ok {
			return s
		}
	}
	return jsonText(v)
}

// parts converts a Gemini content (a string, a part or a list of parts)
// into ctxd content; functionResponse parts become tool results of their
// own.
func (p *geminiParser) parts(g *gmsg, v any) (content any, results []*record.Map) {
	switch c := v.(type) {
	case string:
		return c, nil
	case *record.Map:
		v = []any{c}
	case nil:
		return []any{}, nil
	}
	arr, ok := v.([]any)
	if !ok {
		p.rep.unknown(g.where, "content that is a JSON %s", record.TypeName(v))
		return []any{}, nil
	}
	out := make([]any, 0, len(arr))
	for _, e := range arr {
		pm, ok := e.(*record.Map)
		if !ok {
			if s, ok := e.(string); ok {
				out = append(out, textBlock(s))
			}
			continue
		}
		if fr := mapAt(pm, "functionResponse"); fr != nil {
			r := record.NewMap("role", "toolResult")
			setIf(r, "toolCallId", get(fr, "id"))
			r.Set("toolName", get(fr, "name"))
			r.Set("content", []any{textBlock(responseText(get(fr, "response")))})
			results = append(results, r)
			continue
		}
		out = append(out, p.part(g, pm)...)
	}
	return out, results
}

// part converts one part: text, thought, inline image, function call; a
// part of another kind is kept as it is and reported.
func (p *geminiParser) part(g *gmsg, pm *record.Map) []any {
	if text, ok := pm.String("text"); ok {
		if record.IsTrue(get(pm, "thought")) {
			return []any{record.NewMap("type", "thinking", "thinking", text)}
		}
		if text == "" {
			return nil
		}
		return []any{textBlock(text)}
	}
	if d := mapAt(pm, "inlineData"); d != nil {
		if mime := str(d, "mimeType"); strings.HasPrefix(mime, "image/") {
			return []any{record.NewMap("type", "image", "data", get(d, "data"), "mimeType", mime)}
		}
		p.rep.approx(g.where, "inline data of type %q kept as a Gemini part", str(d, "mimeType"))
		return []any{pm}
	}
	if fc := mapAt(pm, "functionCall"); fc != nil {
		call := record.NewMap("type", "toolCall")
		setIf(call, "id", get(fc, "id"))
		call.Set("name", get(fc, "name"))
		call.Set("arguments", get(fc, "args"))
		return []any{call}
	}
	p.rep.approx(g.where, "a part without text, inline data or a call kept as a Gemini part")
	return []any{pm}
}
