package importer

import (
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

func claudeID(e *ccEntry, source string) string {
	if e.uuid != "" {
		return e.uuid
	}
	return fmt.Sprintf("%s:%d", source, e.n)
}

// claudeMessage converts a user or assistant line: Anthropic content
// blocks, tool_use, tool_result and images included, pass through as
// written. Its JSON holds the content and timestamp as the line wrote
// them; a line read sparsely is decoded again only if its value is asked
// for.
func claudeMessage(rep *Report, e *ccEntry) (Record, bool) {
	msg := mapAt(e.m, "message")
	content, ok := msg.Get("content")
	if msg == nil || !ok {
		rep.unknown(e.where(), "a %s line without message.content", e.typ)
		return Record{}, false
	}
	out := record.NewMap("role", e.typ, "content", content)
	if e.typ == "assistant" {
		setIf(out, "responseId", get(msg, "id"))
		setIf(out, "model", get(msg, "model"))
	}
	setIf(out, "timestamp", get(e.m, "timestamp"))
	raw := map[string][]byte{"content": e.contentRaw()}
	if has(out, "timestamp") {
		if raw["timestamp"] = e.kept.timestamp; !e.sparse {
			raw["timestamp"] = span(e.line, "timestamp")
		}
	}
	class := "user" // a constant: the line's own string would stay in memory with the record
	if e.typ == "assistant" {
		class = "assistant"
	}
	r := Record{class: class, parts: newParts(out, raw)}
	if !e.sparse || r.parts == nil {
		out.Set("content", e.contentValue())
		r.value = out
	}
	return r, true
}

// claudeCompaction builds the checkpoint of a compact_boundary line: the
// summary line as the first message, then the messages the compaction kept.
func claudeCompaction(rep *Report, boundary, summary *ccEntry, byUUID map[string]*ccEntry) checkpoint {
	cm := mapAt(boundary.m, "compactMetadata")
	c := checkpoint{format: ClaudeCode, where: boundary.where(), at: get(boundary.m, "timestamp"), firstKept: 1}
	if r, ok := claudeMessage(rep, summary); ok {
		c.messages = append(c.messages, r)
	}
	c.summary = contentText(summary.contentValue())
	c.before, _ = intAt(cm, "preTokens")
	c.after, _ = intAt(cm, "postTokens")
	c.source = record.NewMap("uuid", boundary.uuid, "summaryUuid", summary.uuid)
	setIf(c.source, "logicalParentUuid", get(boundary.m, "logicalParentUuid"))
	setIf(c.source, "trigger", get(cm, "trigger"))

	var kept []string
	if pm := mapAt(cm, "preservedMessages"); pm != nil {
		for _, u := range arrAt(pm, "uuids") {
			if s, ok := u.(string); ok {
				kept = append(kept, s)
			}
		}
	} else if ps := mapAt(cm, "preservedSegment"); ps != nil {
		head, tail := str(ps, "headUuid"), str(ps, "tailUuid")
		for cur := byUUID[tail]; cur != nil && len(kept) <= len(byUUID); cur = byUUID[cur.parent] {
			kept = append(kept, cur.uuid)
			if cur.uuid == head {
				break
			}
		}
		if len(kept) == 0 || kept[len(kept)-1] != head {
			rep.approx(boundary.where(), "preservedSegment %s..%s not found whole: the compaction keeps only its summary", head, tail)
			kept = nil
		}
		for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
			kept[i], kept[j] = kept[j], kept[i]
		}
	}
	for _, u := range kept {
		e := byUUID[u]
		if e == nil {
			rep.approx(boundary.where(), "preserved message %s is not in the file: left out of the compaction", u)
			continue
		}
		if !e.isMessage() {
			continue
		}
		if r, ok := claudeMessage(rep, e); ok {
			c.messages = append(c.messages, r)
		}
	}
	return c
}

// contentText is the text of a message content: the string, or its text
// blocks joined by blank lines.
func contentText(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, blk := range c {
			if bm, ok := blk.(*record.Map); ok && str(bm, "type") == "text" {
				parts = append(parts, str(bm, "text"))
			}
		}
		return strings.Join(parts, "\n\n")
	}
	return ""
}

// attachmentText is a hook's additional context: a string, or strings
// joined by newlines.
func attachmentText(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, x := range c {
			if s, ok := x.(string); ok {
				parts = append(parts, s)
			} else {
				parts = append(parts, jsonText(x))
			}
		}
		return strings.Join(parts, "\n")
	}
	return jsonText(v)
}
