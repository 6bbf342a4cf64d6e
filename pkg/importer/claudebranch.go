package importer

import (
	"bytes"

	"github.com/ctxd/ctxd/pkg/record"
)

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
