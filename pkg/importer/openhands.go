package importer

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/pkg/record"
)

// OpenHands (the V1 software-agent-sdk) keeps a conversation as a directory:
// base_state.json and events/event-<index>-<uuid>.json, one pretty-printed
// event a file, told apart by "kind". Events link to their parent by
// parent_id. Calls and results link by tool_call_id; a Condensation forgets
// events and puts a summary in their place.

type ohEvent struct {
	file  string
	index int
	m     *record.Map
	kind  string
	id    string
}

// openHandsEvents lists a conversation's event files in index order.
func openHandsEvents(fsys fs.FS) ([]string, error) {
	dir := "events"
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		dir = "."
		if entries, err = fs.ReadDir(fsys, dir); err != nil {
			return nil, err
		}
	}
	type named struct {
		name  string
		index int
	}
	var files []named
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasPrefix(n, "event-") || !strings.HasSuffix(n, ".json") {
			continue
		}
		digits, _, _ := strings.Cut(strings.TrimPrefix(n, "event-"), "-")
		idx, err := strconv.Atoi(strings.TrimSuffix(digits, ".json"))
		if err != nil {
			idx = -1
		}
		files = append(files, named{path.Join(dir, n), idx})
	}
	if len(files) == 0 {
		return nil, errors.New("no OpenHands event files (events/event-*.json) in the directory")
	}
	sort.SliceStable(files, func(i, j int) bool {
		if files[i].index != files[j].index {
			return files[i].index < files[j].index
		}
		return files[i].name < files[j].name
	})
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.name
	}
	return out, nil
}

func parseOpenHandsFile(name string, data []byte) ([]*Transcript, error) {
	return nil, fmt.Errorf("%w (openhands): a conversation is a directory of event files; pass the directory", ErrFormat)
}

func parseOpenHands(fsys fs.FS, name string, maxLine int, maxFile int64) ([]*Transcript, error) {
	files, err := openHandsEvents(fsys)
	if err != nil {
		return nil, fmt.Errorf("%w (openhands): %v", ErrFormat, err)
	}
	var rep Report
	var events []*ohEvent
	for i, f := range files {
		rep.Entries++
		where := path.Base(f)
		data, err := readFile(fsys, f, maxLine, maxFile)
		if err != nil {
			return nil, inFile(where, err)
		}
		// An event that does not decode fails the conversation: events
		// hang off each other (parent_id), and leaving it out would take
		// them with it.
		v, fix, fixLine, err := decodeWhole(data)
		if err != nil {
			return nil, inFile(where, err)
		}
		if fix.bytes > 0 {
			rep.approx(where, "line %d: %s", fixLine, fix)
		}
		m, ok := v.(*record.Map)
		if !ok {
			rep.unknown(where, "a JSON %s, not an event", record.TypeName(v))
			continue
		}
		e := &ohEvent{file: where, index: i, m: m, kind: str(m, "kind"), id: str(m, "id")}
		if e.kind == "" {
			if has(m, "action") || has(m, "observation") {
				rep.unknown(where, "an OpenHands V0 event (action/observation without kind): not supported")
			} else {
				rep.unknown(where, "an event without kind")
			}
			continue
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		return nil, noneUnderstood(&rep, OpenHands)
	}

	conv, leafID := "", ""
	if data, err := readFile(fsys, "base_state.json", maxLine, maxFile); err == nil {
		if v, err := lineDecoder.DecodeJSON(data); err == nil {
			if m, ok := v.(*record.Map); ok {
				conv, leafID = str(m, "id"), str(m, "leaf_event_id")
			}
		}
	}
	source := conv
	if source == "" {
		dir := path.Clean(strings.ReplaceAll(name, "\\", "/"))
		if path.Base(dir) == "events" {
			dir = path.Dir(dir)
		}
		source = path.Base(dir)
	}
	b := newBuilder(conv, SessionID(source))
	b.t.Report = rep
	p := &ohParser{b: b, rep: b.report(), forgotten: map[string]bool{}}
	for _, e := range openHandsPath(b.report(), events, leafID) {
		p.event(e)
	}
	return []*Transcript{b.t}, nil
}

// openHandsPath returns the events of the active branch: the path from the
// leaf (base_state's, else the last event) back through parent_id, or all
// events when none has a parent.
func openHandsPath(rep *Report, events []*ohEvent, leafID string) []*ohEvent {
	byID := map[string]*ohEvent{}
	linked := false
	for _, e := range events {
		if e.id != "" {
			if _, dup := byID[e.id]; !dup {
				byID[e.id] = e
			}
		}
		linked = linked || str(e.m, "parent_id") != ""
	}
	if !linked {
		return events
	}
	leaf := byID[leafID]
	if leaf == nil {
		leaf = events[len(events)-1]
	}
	on := map[*ohEvent]bool{}
	var rev []*ohEvent
	for cur := leaf; cur != nil && !on[cur]; {
		on[cur] = true
		rev = append(rev, cur)
		parent := str(cur.m, "parent_id")
		if parent == "" {
			break
		}
		next := byID[parent]
		if next == nil {
			rep.approx(cur.file, "its parent event %s is not in the directory: the conversation starts here", parent)
		}
		cur = next
	}
	for _, e := range events {
		if !on[e] && (e.kind == "MessageEvent" || e.kind == "ActionEvent" || e.kind == "ObservationEvent") {
			rep.Abandoned++
		}
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

type ohParser struct {
	b   *builder
	rep *Report
	// view is the model's view so far: the converted events, by event id,
	// for the snapshots of condensations.
	view      []ohView
	forgotten map[string]bool
}

type ohView struct {
	id  string
	msg *record.Map
}

func (p *ohParser) add(e *ohEvent, m *record.Map) {
	setIf(m, "timestamp", get(e.m, "timestamp"))
	id := e.id
	if id == "" {
		id = e.file
	}
	p.b.add(id, e.file, m)
	p.view = append(p.view, ohView{e.id, m})
}

func (p *ohParser) event(e *ohEvent) {
	m := e.m
	switch e.kind {
	case "SystemPromptEvent":
		sp := get(m, "system_prompt")
		text, ok := sp.(string)
		if spm, isMap := sp.(*record.Map); isMap {
			text, ok = spm.String("text")
		}
		if !ok {
			p.rep.unknown(e.file, "a SystemPromptEvent without system_prompt text")
			return
		}
		p.add(e, record.NewMap("role", "system", "content", []any{textBlock(text)}))
	case "MessageEvent":
		lm := mapAt(m, "llm_message")
		role := str(lm, "role")
		if role != "user" && role != "assistant" && role != "system" {
			p.rep.unknown(e.file, "a MessageEvent with role %q", role)
			return
		}
		content := p.content(e, get(lm, "content"))
		if role == "assistant" {
			content = append(thinking(lm), content...)
		}
		content = append(content, p.content(e, get(m, "extended_content"))...)
		p.add(e, record.NewMap("role", role, "content", content))
	case "ActionEvent":
		content := thinking(m)
		for _, t := range p.content(e, get(m, "thought")) {
			if tb, ok := t.(*record.Map); ok && str(tb, "type") == "text" && str(tb, "text") == "" {
				continue // an empty thought is no text
			}
			content = append(content, t)
		}
		tc := mapAt(m, "tool_call")
		id, name, args := get(tc, "id"), get(tc, "name"), get(tc, "arguments")
		if tc == nil {
			id, name, args = get(m, "tool_call_id"), get(m, "tool_name"), jsonText(get(m, "action"))
			p.rep.approx(e.file, "an ActionEvent without tool_call: arguments taken from its action")
		}
		entry := record.NewMap()
		setIf(entry, "id", id)
		entry.Set("type", "function")
		entry.Set("function", record.NewMap("name", name, "arguments", argumentsText(args)))
		p.add(e, record.NewMap("role", "assistant", "content", content, "tool_calls", []any{entry}))
	case "ObservationEvent":
		obs := mapAt(m, "observation")
		content := append(p.content(e, get(obs, "content")), p.content(e, get(m, "extended_content"))...)
		p.add(e, p.tool(m, content))
	case "UserRejectObservation":
		reason := "User rejected the action"
		if r, ok := m.String("rejection_reason"); ok {
			reason = r
		}
		p.add(e, p.tool(m, []any{textBlock("Action rejected: " + reason)}))
	case "AgentErrorEvent":
		p.add(e, p.tool(m, []any{textBlock(str(m, "error"))}))
	case "Condensation":
		p.condensation(e)
	default:
		p.rep.metadata(e.kind)
	}
}

func (p *ohParser) tool(m *record.Map, content []any) *record.Map {
	return record.NewMap("role", "tool", "tool_call_id", get(m, "tool_call_id"), "name", get(m, "tool_name"), "content", content)
}

// thinking keeps an event's Anthropic thinking blocks and its reasoning
// content as thinking blocks.
func thinking(m *record.Map) []any {
	var out []any
	for _, t := range arrAt(m, "thinking_blocks") {
		out = append(out, t)
	}
	if rc := str(m, "reasoning_content"); rc != "" {
		out = append(out, record.NewMap("type", "thinking", "thinking", rc))
	}
	return out
}

// content converts OpenHands content: TextContent becomes a text block and
// ImageContent one image block per data URL.
func (p *ohParser) content(e *ohEvent, v any) []any {
	arr, _ := v.([]any)
	out := make([]any, 0, len(arr))
	for _, x := range arr {
		bm, ok := x.(*record.Map)
		if !ok {
			continue
		}
		switch str(bm, "type") {
		case "text":
			out = append(out, textBlock(str(bm, "text")))
		case "image":
			for _, u := range arrAt(bm, "image_urls") {
				url, _ := u.(string)
				if img, ok := imageFromDataURL(url); ok {
					out = append(out, img)
				} else {
					p.rep.approx(e.file, "an image by URL cannot be inlined: kept as a text naming the URL")
					out = append(out, textBlock("[image: "+url+"]"))
				}
			}
		default:
			out = append(out, bm)
		}
	}
	return out
}

// condensation makes a compaction of the view after forgetting: the events
// the condensations so far kept, with the summary at its offset.
func (p *ohParser) condensation(e *ohEvent) {
	for _, id := range arrAt(e.m, "forgotten_event_ids") {
		if s, ok := id.(string); ok {
			p.forgotten[s] = true
		}
	}
	var msgs []*record.Map
	for _, v := range p.view {
		if !p.forgotten[v.id] {
			msgs = append(msgs, v.msg)
		}
	}
	summary, hasSummary := e.m.String("summary")
	c := checkpoint{format: OpenHands, where: e.file, at: get(e.m, "timestamp"), summary: summary}
	if hasSummary {
		off, _ := intAt(e.m, "summary_offset")
		off = min(max(off, 0), int64(len(msgs)))
		sm := record.NewMap("role", "user", "content", []any{textBlock(summary)})
		msgs = append(msgs[:off], append([]*record.Map{sm}, msgs[off:]...)...)
		c.firstKept = int(off) + 1
	}
	c.keepAll(msgs)
	c.source = record.NewMap("id", e.id, "forgotten", int64(len(arrAt(e.m, "forgotten_event_ids"))))
	id := e.id
	if id == "" {
		id = e.file
	}
	p.b.addCheckpoint(id, e.file, c)
}

// readFile reads a file of fsys as Parse reads one.
func readFile(fsys fs.FS, name string, maxLine int, maxFile int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAll(f, maxLine, maxFile)
}

// inFile names an event file in the place of an error: its line, when the
// error names one.
func inFile(file string, err error) error {
	if e := (*Error)(nil); errors.As(err, &e) {
		where := file
		if e.Where != "" {
			where += ": " + e.Where
		}
		return &Error{Where: where, Err: e.Err}
	}
	return &Error{Where: file, Err: err}
}
