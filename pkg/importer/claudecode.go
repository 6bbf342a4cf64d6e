package importer

import (
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
