package importer

import (
	"fmt"
	"strconv"

	"github.com/ctxd/ctxd/pkg/record"
)

// pi writes a session header line, then one entry a line. Version 1 is a
// plain sequence whose compactions name the first kept entry by its index
// among the file's entries (the header is index 0); versions 2 and 3 give
// every entry an id and a parentId, a tree whose active branch ends at the
// last entry. ctxd's record model is pi's: messages pass through as they
// are.

// pi's own texts around the summaries it turns into user messages
// (packages/coding-agent/src/core/messages.ts).
const (
	piCompactionPrefix = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
	piCompactionSuffix = "\n</summary>"
	piBranchPrefix     = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
	piBranchSuffix     = "</summary>"
)

// piMetadata are the entry types that never reach the model; ctxd knows
// them and keeps them out of the context, so they are imported as they are.
var piMetadata = map[string]bool{
	"model_change": true, "thinking_level_change": true, "session_info": true, "label": true, "custom": true,
}

var piFields = &messageFields{
	top:   []string{"type", "id", "parentId", "timestamp", "message"},
	inner: []string{"role", "content"},
	types: map[string]bool{"message": true},
}

// piScan reads a large message entry without decoding it: its envelope
// and the message's role; the message stays as the line wrote it. A
// hookMessage, which is renamed, is decoded whole.
func piScan(line []byte) (*record.Map, kept) {
	m, k := scanMessage(line, piFields)
	if r := str(mapAt(m, "message"), "role"); r == "" || r == "hookMessage" {
		return nil, kept{}
	}
	return m, k
}

type piEntry struct {
	n      int
	line   []byte
	sparse bool // m holds only what the conversion reads: the message is in line
	kept   kept
	index  int // among the file's entries, the header being 0
	m      *record.Map
	typ    string
	id     string
	parent string
}

func parsePi(name string, data []byte, sparse bool) ([]*Transcript, error) {
	var rep Report
	var entries []*piEntry
	var header *record.Map
	headerLine := 0
	var headerRaw []byte
	index := 0
	var scan scanner
	if sparse {
		scan = piScan
	}
	err := eachDecoded(data, &rep, scan, func(n int, line []byte, m *record.Map, k kept) {
		e := &piEntry{n: n, line: line, index: index, m: m, typ: str(m, "type"), id: str(m, "id"), parent: str(m, "parentId"),
			sparse: k.sparse, kept: k}
		index++
		if header == nil && e.typ == "session" {
			header, headerLine, headerRaw = m, n, line
			return
		}
		entries = append(entries, e)
	})
	if err != nil {
		return nil, err
	}
	if header == nil {
		if len(rep.Unknown) > 0 && len(entries) == 0 {
			return nil, noneUnderstood(&rep, Pi)
		}
		return nil, &Error{Where: "line 1", Err: fmt.Errorf("%w (pi): no session header (a line with \"type\":\"session\")", ErrFormat)}
	}
	sid := str(header, "id")
	source := sid
	if source == "" {
		source = baseName(name)
	}
	version, ok := intAt(header, "version")
	if !ok {
		version = 1
	}
	b := newBuilder(sid, SessionID(source))
	b.t.Report = rep
	rep2 := b.report()
	id := func(e *piEntry) string {
		if version >= 2 && e.id != "" {
			return source + ":" + e.id
		}
		return source + ":" + strconv.Itoa(e.n)
	}
	b.addRaw(source+":header", lineWhere(headerLine), header, headerRaw)

	path := piPath(rep2, entries, version)
	// Messages converted so far on the path, by entry, for the snapshots.
	converted := map[*piEntry]Record{}
	for i, e := range path {
		where := lineWhere(e.n)
		switch {
		case e.typ == "message":
			msg := mapAt(e.m, "message")
			if msg == nil {
				rep2.unknown(where, "a message entry without a message")
				continue
			}
			raw := e.kept.message
			if !e.sparse {
				raw = span(e.line, "message")
			}
			r := Record{ID: id(e), Where: where, class: classOf(msg), raw: raw}
			switch {
			case str(msg, "role") == "hookMessage":
				if e.sparse {
					msg = r.Value() // decoded whole from raw
				}
				msg = with(msg, "role", "custom") // renamed in version 3
				r.class, r.value, r.raw = classOf(msg), msg, nil
			case !e.sparse:
				r.value = msg
			} // else the value is decoded from raw when asked for
			converted[e] = r
			b.addRecord(r)
		case e.typ == "custom_message":
			converted[e] = Record{value: e.m, raw: e.line}
			b.addRaw(id(e), where, e.m, e.line)
		case e.typ == "branch_summary":
			summary := str(e.m, "summary")
			if summary == "" {
				rep2.metadata("branch_summary (empty)")
				continue
			}
			// ctxd drops pi's branch summary role; the model reads it as this text.
			msg := record.NewMap("role", "user", "content", []any{textBlock(piBranchPrefix + summary + piBranchSuffix)})
			setIf(msg, "timestamp", millis(get(e.m, "timestamp")))
			converted[e] = Record{value: msg}
			b.add(id(e), where, msg)
		case e.typ == "compaction":
			b.addCheckpoint(id(e), where, piCompaction(rep2, e, path[:i], converted, entries))
		case piMetadata[e.typ]:
			b.addRaw(id(e), where, e.m, e.line)
		default:
			rep2.unknown(where, "type %q", e.typ)
		}
	}
	return []*Transcript{b.t}, nil
}

// piPath returns the entries of the active branch, root first: all of
// them in version 1, else the path from the last entry to the root.
func piPath(rep *Report, entries []*piEntry, version int64) []*piEntry {
	if version < 2 || len(entries) == 0 {
		return entries
	}
	byID := map[string]*piEntry{}
	for _, e := range entries {
		if _, dup := byID[e.id]; !dup && e.id != "" {
			byID[e.id] = e
		}
	}
	onPath := map[*piEntry]bool{}
	var rev []*piEntry
	for cur := entries[len(entries)-1]; cur != nil && !onPath[cur]; {
		onPath[cur] = true
		rev = append(rev, cur)
		if cur.parent == "" {
			break
		}
		next := byID[cur.parent]
		if next == nil {
			rep.approx(lineWhere(cur.n), "its parent %s is not in the file: the conversation starts here", cur.parent)
		}
		cur = next
	}
	for _, e := range entries {
		if !onPath[e] && e.typ == "message" {
			rep.Abandoned++
		}
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// piCompaction builds the checkpoint of a compaction entry the way pi
// builds the context after it: the summary as a user message, then the
// messages of the path from the first kept entry up to the compaction.
func piCompaction(rep *Report, e *piEntry, before []*piEntry, converted map[*piEntry]Record, all []*piEntry) checkpoint {
	where := lineWhere(e.n)
	summary, ok := e.m.String("summary")
	if !ok {
		rep.approx(where, "a compaction without a summary: its summary message is empty")
	}
	c := checkpoint{format: Pi, where: where, at: get(e.m, "timestamp"), summary: summary, firstKept: 1}
	c.before, _ = intAt(e.m, "tokensBefore")
	c.source = record.NewMap()
	for _, k := range []string{"id", "firstKeptEntryId", "firstKeptEntryIndex", "details", "fromHook"} {
		setIf(c.source, k, get(e.m, k))
	}
	msg := record.NewMap("role", "user", "content", []any{textBlock(piCompactionPrefix + summary + piCompactionSuffix)})
	setIf(msg, "timestamp", millis(get(e.m, "timestamp")))
	c.keep(msg, nil)

	var first *piEntry
	if idx, ok := intAt(e.m, "firstKeptEntryIndex"); ok {
		for _, x := range all {
			if int64(x.index) == idx {
				first = x
				break
			}
		}
	} else if kid := str(e.m, "firstKeptEntryId"); kid != "" {
		for _, x := range before {
			if x.id == kid {
				first = x
				break
			}
		}
	}
	if first == nil {
		rep.approx(where, "the compaction's first kept entry is not on the branch: it keeps only its summary, as pi does")
	}
	keep := false
	for _, x := range before {
		keep = keep || x == first
		if r, ok := converted[x]; keep && ok {
			c.messages = append(c.messages, r)
		}
	}
	return c
}
