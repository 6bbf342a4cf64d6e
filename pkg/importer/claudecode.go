package importer

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// Claude Code writes one JSON object a line. Lines with a uuid form a graph
// through parentUuid; the conversation is the path from the last message
// back to the root (a compact_boundary line, a root of its own, continues
// through logicalParentUuid). One API response is written as one line per
// content block; parallel tool calls chain those lines, and each result
// hangs off its own call, off the path. Lines of subagents carry
// isSidechain and an agentId.

// claudeMetadata are the line types that never reach the model.
var claudeMetadata = map[string]bool{
	"summary": true, "file-history-snapshot": true, "queue-operation": true,
	"progress": true, "last-prompt": true, "permission-mode": true, "mode": true,
	"agent-setting": true, "pr-link": true, "ai-title": true, "custom-title": true,
	"agent-name": true, "tag": true,
}

type ccEntry struct {
	n      int
	line   []byte
	sparse bool // m holds only what the conversion reads: message.content is in line
	kept   kept
	// content caches message.content decoded from line.
	content    any
	hasContent bool
	m          *record.Map
	typ        string
	uuid       string
	parent     string
	side       bool
	agent      string
	msgID      string // message.id of an assistant line
	// What the conversion of the line's group marks: on the active branch,
	// a compact summary emitted with its boundary, and the last subtree
	// walk that met it.
	selected, consumed bool
	walk               int
}

func (e *ccEntry) where() string { return lineWhere(e.n) }

func (e *ccEntry) isMessage() bool { return e.typ == "user" || e.typ == "assistant" }

// contentValue returns message.content, decoding it from the line when the
// line was read sparsely.
func (e *ccEntry) contentValue() any {
	if !e.sparse {
		return get(mapAt(e.m, "message"), "content")
	}
	if !e.hasContent {
		e.content, _ = rawDecoder.DecodeJSON(e.contentRaw())
		e.hasContent = true
	}
	return e.content
}

// block is what the branch selection reads of a content block.
type block struct {
	isMap          bool
	typ, id, useID string // type, id (a tool_use's), tool_use_id (a tool_result's)
}

// blocks lists the blocks of message.content (none when it is not an
// array); a content read sparsely is scanned, not decoded.
func (e *ccEntry) blocks() []block {
	if e.kept.hasBlocks {
		return e.kept.blocks
	}
	if !e.sparse {
		return e.decodedBlocks()
	}
	var out []block
	arr := e.contentRaw()
	if len(arr) == 0 || arr[0] != '[' {
		return nil
	}
	text := func(raw []byte) string {
		if raw == nil {
			return ""
		}
		v, _ := smallValue(raw)
		s, _ := v.(string)
		return s
	}
	var f [3][]byte
	for i := skipSpace(arr, 1); i < len(arr) && arr[i] != ']'; {
		end := skipValue(arr, i)
		if end < 0 {
			break
		}
		elem := arr[i:end]
		b := block{isMap: elem[0] == '{'}
		if b.isMap {
			if !members(elem, []string{"type", "id", "tool_use_id"}, f[:]) {
				return e.decodedBlocks() // a block the scan cannot read as the decoder does
			}
			b.typ, b.id, b.useID = text(f[0]), text(f[1]), text(f[2])
		}
		out = append(out, b)
		if i = skipSpace(arr, end); i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return out
}

// decodedBlocks lists the blocks of the decoded message.content.
func (e *ccEntry) decodedBlocks() []block {
	content, _ := e.contentValue().([]any)
	out := make([]block, 0, len(content))
	for _, v := range content {
		bm, ok := v.(*record.Map)
		out = append(out, block{isMap: ok, typ: str(bm, "type"), id: str(bm, "id"), useID: str(bm, "tool_use_id")})
	}
	return out
}

// contentRaw returns the bytes of message.content, nil when absent.
func (e *ccEntry) contentRaw() []byte {
	if e.sparse {
		return e.kept.content
	}
	return span(e.line, "message", "content")
}

// claudeScan reads a large user or assistant line without decoding it:
// the fields the conversion reads, and message.content as the line wrote
// it. toolUseResult, a copy of the result for the UI that the conversion
// drops, is never decoded.
func claudeScan(line []byte) (*record.Map, kept) {
	m, k := scanMessage(line, claudeFields)
	if m != nil {
		e := &ccEntry{line: line, m: m, typ: str(m, "type"), sparse: true, kept: k}
		if r, ok := claudeMessage(&Report{}, e); ok {
			k.rec = &r
		}
		// The branch selection reads the blocks of most messages.
		k.blocks, k.hasBlocks = e.blocks(), true
	}
	return m, k
}

var claudeFields = &messageFields{
	top:   []string{"type", "uuid", "parentUuid", "isSidechain", "agentId", "sessionId", "timestamp", "isCompactSummary", "message"},
	inner: []string{"id", "model", "content"},
	types: map[string]bool{"user": true, "assistant": true},
}

func (e *ccEntry) isBoundary() bool {
	return e.typ == "system" && str(e.m, "subtype") == "compact_boundary"
}

// ccGroup is the lines of one conversation in a file: the main one or a
// subagent's.
type ccGroup struct {
	agent   string
	side    bool
	entries []*ccEntry
}

func parseClaudeCode(name string, data []byte, sparse bool) ([]*Transcript, error) {
	var fileRep Report
	understood := 0
	var groups []*ccGroup
	byAgent := map[string]*ccGroup{}
	main := &ccGroup{}
	groups = append(groups, main)
	sessionID := ""
	var scan scanner
	if sparse {
		scan = claudeScan
	}
	err := eachDecoded(data, &fileRep, scan, func(n int, line []byte, m *record.Map, k kept) {
		e := &ccEntry{n: n, line: line, m: m, typ: str(m, "type"), uuid: str(m, "uuid"), parent: str(m, "parentUuid"),
			side: record.IsTrue(get(m, "isSidechain")), agent: str(m, "agentId"), sparse: k.sparse, kept: k}
		switch {
		case e.isMessage() || e.typ == "system" || e.typ == "attachment":
			understood++
		case claudeMetadata[e.typ]:
			understood++
			fileRep.metadata(e.typ)
			return
		default:
			if e.uuid == "" {
				fileRep.unknown(e.where(), "type %q", e.typ)
				return
			}
			// An unknown line in the graph still links its children.
			fileRep.unknown(e.where(), "type %q", e.typ)
		}
		if sessionID == "" {
			sessionID = str(m, "sessionId")
		}
		if e.typ == "assistant" {
			e.msgID = str(mapAt(m, "message"), "id")
		}
		g := main
		if e.side {
			if g = byAgent[e.agent]; g == nil {
				g = &ccGroup{agent: e.agent, side: true}
				byAgent[e.agent] = g
				groups = append(groups, g)
			}
		}
		g.entries = append(g.entries, e)
	})
	if err != nil {
		return nil, err
	}
	if understood == 0 {
		return nil, noneUnderstood(&fileRep, ClaudeCode)
	}
	var out []*Transcript
	for _, g := range groups {
		hasMessages := false
		for _, e := range g.entries {
			hasMessages = hasMessages || e.isMessage()
		}
		if !hasMessages && (g.side || len(groups) > 1) {
			continue
		}
		source := claudeSession(name, g, sessionID)
		session := SessionID(source)
		if g.side {
			session = AgentSession(source, g.agent)
		}
		b := newBuilder(source, session)
		b.t.Agent = g.agent
		convertClaudeGroup(b, g, source)
		out = append(out, b.t)
	}
	if len(out) == 0 { // only metadata, or only lines of empty groups
		source := claudeSession(name, main, sessionID)
		out = append(out, newBuilder(source, SessionID(source)).t)
	}
	// Lines that belong to no conversation are reported with the first.
	r := &out[0].Report
	r.Entries += fileRep.Entries
	r.Unknown = append(fileRep.Unknown, r.Unknown...)
	r.Approximations = append(fileRep.Approximations, r.Approximations...)
	for k, v := range fileRep.Metadata {
		r.Metadata = addCount(r.Metadata, k, v)
	}
	return out, nil
}

// claudeSession is the session a conversation belongs to. Claude Code
// names a session's file after it, and a resumed session's file starts
// with lines copied from the old session, carrying the old id: the file
// name decides when it is a session id, else the id of the conversation's
// last message (a subagent's lines carry their parent session's id).
func claudeSession(name string, g *ccGroup, first string) string {
	if base := baseName(name); !g.side && isUUID(base) {
		return base
	}
	for i := len(g.entries) - 1; i >= 0; i-- {
		if e := g.entries[i]; e.isMessage() {
			if sid := str(e.m, "sessionId"); sid != "" {
				return sid
			}
		}
	}
	if first != "" {
		return first
	}
	return baseName(name)
}

// isUUID reports whether s is spelled like a UUID.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range []byte(s) {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

func addCount(m map[string]int, k string, v int) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[k] += v
	return m
}

// convertClaudeGroup selects a conversation's active branch and converts it.
func convertClaudeGroup(b *builder, g *ccGroup, source string) {
	rep := b.report()
	byUUID := make(map[string]*ccEntry, len(g.entries))
	children := make(map[string][]*ccEntry, len(g.entries))
	entries := make([]*ccEntry, 0, len(g.entries)) // deduplicated, in file order
	for _, e := range g.entries {
		if e.uuid != "" {
			if _, dup := byUUID[e.uuid]; dup {
				// A resumed session copies earlier lines with their uuids.
				rep.metadata("duplicate uuid")
				continue
			}
			byUUID[e.uuid] = e
			if e.parent != "" {
				children[e.parent] = append(children[e.parent], e)
			}
		}
		entries = append(entries, e)
	}
	selectClaudeBranch(rep, entries, byUUID, children)
	n := 0
	for _, e := range entries {
		if e.selected {
			n++
		}
	}
	b.grow(n)

	// Compact summaries are emitted inside their boundary's compaction.
	for _, e := range entries {
		if !e.selected {
			continue
		}
		switch {
		case e.typ == "user" && e.consumed:
		case e.typ == "user" && record.IsTrue(get(e.m, "isCompactSummary")):
			rep.approx(e.where(), "a compact summary without its compact_boundary line: imported as a user message")
			fallthrough
		case e.isMessage():
			r, ok := Record{}, e.kept.rec != nil
			if ok {
				r = *e.kept.rec
			} else {
				r, ok = claudeMessage(rep, e)
			}
			if ok {
				r.ID, r.Where = claudeID(e, source), e.where()
				b.addRecord(r)
			}
		case e.isBoundary():
			var summary *ccEntry
			for _, c := range children[e.uuid] {
				if c.typ == "user" && record.IsTrue(get(c.m, "isCompactSummary")) {
					summary = c
					break
				}
			}
			if summary == nil {
				rep.approx(e.where(), "a compact_boundary without its summary line (yet): not imported, the context keeps what came before")
				continue
			}
			summary.consumed = true
			b.addCheckpoint(claudeID(e, source), e.where(), claudeCompaction(rep, e, summary, byUUID))
		case e.typ == "system":
			if st := str(e.m, "subtype"); st != "" {
				rep.metadata("system/" + st)
			} else {
				rep.metadata("system")
			}
		case e.typ == "attachment":
			att := mapAt(e.m, "attachment")
			typ := str(att, "type")
			if typ != "hook_additional_context" {
				rep.metadata("attachment/" + typ)
				continue
			}
			// Context a hook added: the model read it, as a reminder.
			b.add(claudeID(e, source), e.where(), record.NewMap(
				"role", "custom", "customType", "claude-code/hook_additional_context",
				"content", attachmentText(get(att, "content")), "timestamp", get(e.m, "timestamp")))
		}
	}
	for _, e := range entries {
		if !e.selected && e.isMessage() {
			rep.Abandoned++
		}
	}
}

// selectClaudeBranch marks the entries of the active branch selected: the
// path from the last message back to the root, and the parallel-call
// artefacts that hang off it.
func selectClaudeBranch(rep *Report, entries []*ccEntry, byUUID map[string]*ccEntry, children map[string][]*ccEntry) {
	// The leaf is the last message, or a compaction boundary written after
	// it (its summary line not written yet).
	var leaf *ccEntry
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].isMessage() || entries[i].isBoundary() {
			leaf = entries[i]
			break
		}
	}
	if leaf == nil {
		for _, e := range entries {
			e.selected = true
		}
		return
	}
	if leaf.uuid == "" {
		// No graph: lines without uuids are a plain sequence.
		for _, e := range entries {
			e.selected = e.uuid == ""
		}
		return
	}
	var path []*ccEntry
	for cur := leaf; cur != nil && !cur.selected; {
		cur.selected = true
		path = append(path, cur)
		p := cur.parent
		if p == "" && cur.isBoundary() {
			p = str(cur.m, "logicalParentUuid")
		}
		if p == "" {
			break
		}
		next := byUUID[p]
		if next == nil {
			rep.approx(cur.where(), "its parent %s is not in the file: the conversation starts here", p)
		}
		cur = next
	}

	// Parallel calls: the lines of one API response share message.id; the
	// continuation of the chain and each call's result are siblings. A
	// subtree off the path that holds only lines of responses on the path,
	// results of their calls and lines that are not messages is part of the
	// conversation; any other subtree is a branch the user left.
	responses := map[string]bool{}
	for _, e := range path {
		if e.typ == "assistant" && e.msgID != "" {
			responses[e.msgID] = true
		}
	}
	calls := map[string]bool{}
	for _, e := range entries {
		if e.typ == "assistant" && responses[e.msgID] {
			if e.sparse && !bytes.Contains(e.contentRaw(), []byte(`"tool_use"`)) {
				continue // no call in it: no need to read it
			}
			for _, b := range e.blocks() {
				if b.typ == "tool_use" {
					calls[b.id] = true
				}
			}
		}
	}
	artefact := func(e *ccEntry) bool {
		switch e.typ {
		case "assistant":
			return e.msgID != "" && responses[e.msgID]
		case "user":
			if record.IsTrue(get(e.m, "isCompactSummary")) {
				return false
			}
			blocks := e.blocks()
			for _, b := range blocks {
				if !b.isMap || b.typ != "tool_result" || !calls[b.useID] {
					return false
				}
			}
			return len(blocks) > 0
		}
		return true
	}
	walk := 0
	for _, p := range path {
		for _, c := range children[p.uuid] {
			if c.selected {
				continue
			}
			walk++
			sub := subtree(c, children, walk)
			ok := true
			for _, e := range sub {
				ok = ok && artefact(e)
			}
			if ok {
				for _, e := range sub {
					e.selected = true
				}
			}
		}
	}
}

// subtree lists c and its descendants that are not selected; walk is a
// number no earlier walk over the entries used.
func subtree(c *ccEntry, children map[string][]*ccEntry, walk int) []*ccEntry {
	var out []*ccEntry
	stack := []*ccEntry{c}
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e.walk == walk || e.selected {
			continue
		}
		e.walk = walk
		out = append(out, e)
		if e.uuid != "" {
			stack = append(stack, children[e.uuid]...)
		}
	}
	return out
}

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
