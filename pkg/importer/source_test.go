package importer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// This file reads the samples a second way, with encoding/json and no code
// of the package, to know what their active branch holds: the counts and
// ids an import must reproduce.

type obj = map[string]any

// srcItem is one model-visible entry of a source's active branch.
type srcItem struct {
	user       bool     // a user message that is not only tool results
	calls      []string // ids of the calls it makes (client-side)
	results    []string // ids of the calls it answers
	images     []string // base64 data of its images
	compaction bool     // a checkpoint: the context restarts here
}

// source is what a sample's active branch holds.
type source struct {
	items     []srcItem
	abandoned []string // texts found only on branches the conversation left
}

func (s *source) count() (users int, calls, results []string) {
	for _, it := range s.items {
		if it.user {
			users++
		}
		calls = append(calls, it.calls...)
		results = append(results, it.results...)
	}
	return users, calls, results
}

// window is the items after the last checkpoint.
func (s *source) window() []srcItem {
	for i := len(s.items) - 1; i >= 0; i-- {
		if s.items[i].compaction {
			return s.items[i+1:]
		}
	}
	return s.items
}

func readLines(t *testing.T, path string) []obj {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []obj
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m obj
		require.NoError(t, json.Unmarshal(line, &m))
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

func s(v any) string { x, _ := v.(string); return x }
func o(v any) obj    { x, _ := v.(obj); return x }
func a(v any) []any  { x, _ := v.([]any); return x }

// textsOf collects every string under "text" keys of v.
func textsOf(v any, out *[]string) {
	switch x := v.(type) {
	case obj:
		for k, e := range x {
			if str, ok := e.(string); ok && (k == "text" || k == "content") {
				*out = append(*out, str)
			} else {
				textsOf(e, out)
			}
		}
	case []any:
		for _, e := range x {
			textsOf(e, out)
		}
	}
}

// abandonedTexts keeps the texts of left entries that no kept entry holds.
func abandonedTexts(kept, left []any) []string {
	var in, out []string
	for _, k := range kept {
		textsOf(k, &in)
	}
	for _, l := range left {
		textsOf(l, &out)
	}
	seen := map[string]bool{}
	for _, t := range in {
		seen[t] = true
	}
	var res []string
	for _, t := range out {
		if !seen[t] && len(strings.TrimSpace(t)) > 3 {
			res = append(res, t)
		}
	}
	return res
}

// claudeSource reads a Claude Code file: the path from the last message,
// plus the lines off the path that belong to the path's responses (same
// message.id) or only answer their calls.
func claudeSource(t *testing.T, path string) source {
	lines := readLines(t, path)
	byUUID := map[string]obj{}
	var order []obj
	for _, l := range lines {
		if u := s(l["uuid"]); u != "" {
			if _, dup := byUUID[u]; dup {
				continue
			}
			byUUID[u] = l
		}
		order = append(order, l)
	}
	isMsg := func(l obj) bool { return l["type"] == "user" || l["type"] == "assistant" }
	sideFile := true
	for _, l := range order {
		if isMsg(l) && l["isSidechain"] != true {
			sideFile = false
		}
	}
	var leaf obj
	for i := len(order) - 1; i >= 0; i-- {
		if isMsg(order[i]) && (sideFile || order[i]["isSidechain"] != true) {
			leaf = order[i]
			break
		}
	}
	in := map[string]bool{}
	for cur := leaf; cur != nil; {
		in[s(cur["uuid"])] = true
		p := s(cur["parentUuid"])
		if p == "" {
			p = s(cur["logicalParentUuid"])
		}
		cur = byUUID[p]
	}
	responses := map[string]bool{}
	for u := range in {
		if l := byUUID[u]; l["type"] == "assistant" {
			responses[s(o(l["message"])["id"])] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for _, l := range order {
			u := s(l["uuid"])
			if u == "" || in[u] || !in[s(l["parentUuid"])] {
				continue
			}
			ok := !isMsg(l)
			if l["type"] == "assistant" {
				ok = responses[s(o(l["message"])["id"])]
			}
			if l["type"] == "user" && l["isCompactSummary"] != true {
				calls := map[string]bool{}
				for v := range in {
					for _, b := range a(o(byUUID[v]["message"])["content"]) {
						if o(b)["type"] == "tool_use" {
							calls[s(o(b)["id"])] = true
						}
					}
				}
				content := a(o(l["message"])["content"])
				ok = len(content) > 0
				for _, b := range content {
					ok = ok && o(b)["type"] == "tool_result" && calls[s(o(b)["tool_use_id"])]
				}
			}
			if ok {
				in[u], changed = true, true
			}
		}
	}
	var src source
	var kept, left []any
	for _, l := range order {
		if !isMsg(l) && !(l["type"] == "system" && l["subtype"] == "compact_boundary") {
			continue
		}
		if !in[s(l["uuid"])] {
			if isMsg(l) {
				left = append(left, l["message"])
			}
			continue
		}
		kept = append(kept, l["message"])
		var it srcItem
		if l["type"] == "system" {
			it.compaction = true
			src.items = append(src.items, it)
			continue
		}
		if l["isCompactSummary"] == true {
			continue // part of the checkpoint
		}
		content := o(l["message"])["content"]
		if _, isText := content.(string); isText && l["type"] == "user" {
			it.user = true
		}
		for _, b := range a(content) {
			bm := o(b)
			switch bm["type"] {
			case "tool_use":
				it.calls = append(it.calls, s(bm["id"]))
			case "tool_result":
				it.results = append(it.results, s(bm["tool_use_id"]))
				for _, c := range a(bm["content"]) {
					if o(c)["type"] == "image" {
						it.images = append(it.images, s(o(o(c)["source"])["data"]))
					}
				}
			case "image":
				it.images = append(it.images, s(o(bm["source"])["data"]))
				it.user = it.user || l["type"] == "user"
			default:
				it.user = it.user || l["type"] == "user"
			}
		}
		src.items = append(src.items, it)
	}
	src.abandoned = abandonedTexts(kept, left)
	return src
}

// codexSource reads a Codex rollout: every response item, in order.
func codexSource(t *testing.T, path string) source {
	var src source
	for _, l := range readLines(t, path) {
		p := o(l["payload"])
		var it srcItem
		switch l["type"] {
		case "compacted":
			it.compaction = true
		case "response_item":
			switch p["type"] {
			case "message":
				it.user = p["role"] == "user"
				for _, c := range a(p["content"]) {
					if url := s(o(c)["image_url"]); o(c)["type"] == "input_image" && strings.HasPrefix(url, "data:image/") {
						it.images = append(it.images, url[strings.Index(url, ",")+1:])
					}
				}
			case "function_call", "custom_tool_call", "local_shell_call", "tool_search_call":
				it.calls = []string{s(p["call_id"])}
			case "function_call_output", "custom_tool_call_output", "tool_search_output":
				it.results = []string{s(p["call_id"])}
			case "image_generation_call":
				it.images = []string{s(p["result"])} // the image the provider made
			default:
				continue
			}
		default:
			continue
		}
		src.items = append(src.items, it)
	}
	return src
}

// piSource reads a pi file: all entries of version 1, else the path from
// the last entry through parentId.
func piSource(t *testing.T, path string) source {
	lines := readLines(t, path)
	header, entries := lines[0], lines[1:]
	onPath := map[int]bool{}
	if v, _ := header["version"].(float64); v >= 2 {
		byID := map[string]int{}
		for i, e := range entries {
			byID[s(e["id"])] = i
		}
		for i, ok := len(entries)-1, true; ok; i, ok = byID[s(entries[i]["parentId"])] {
			onPath[i] = true
		}
	} else {
		for i := range entries {
			onPath[i] = true
		}
	}
	var src source
	var kept, left []any
	for i, e := range entries {
		if !onPath[i] {
			left = append(left, e)
			continue
		}
		kept = append(kept, e)
		var it srcItem
		switch e["type"] {
		case "compaction":
			it.compaction = true
		case "message":
			m := o(e["message"])
			switch m["role"] {
			case "user":
				it.user = true
			case "assistant":
				for _, b := range a(m["content"]) {
					if o(b)["type"] == "toolCall" {
						it.calls = append(it.calls, s(o(b)["id"]))
					}
				}
			case "toolResult":
				it.results = []string{s(m["toolCallId"])}
			}
			for _, b := range a(m["content"]) {
				if o(b)["type"] == "image" {
					it.images = append(it.images, s(o(b)["data"]))
				}
			}
		default:
			continue
		}
		src.items = append(src.items, it)
	}
	src.abandoned = abandonedTexts(kept, left)
	return src
}

// geminiSource reads a Gemini chat: the legacy file's messages, or the
// JSONL log with upserts and rewinds applied.
func geminiSource(t *testing.T, path string) source {
	var msgs []obj
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var whole obj
	if json.Unmarshal(data, &whole) == nil && whole["messages"] != nil {
		for _, m := range a(whole["messages"]) {
			msgs = append(msgs, o(m))
		}
	} else {
		for _, l := range readLines(t, path) {
			if target, ok := l["$rewindTo"].(string); ok {
				for i, m := range msgs {
					if m["id"] == target {
						msgs = msgs[:i]
						break
					}
				}
				continue
			}
			if l["id"] == nil || l["type"] == nil {
				continue
			}
			replaced := false
			for i, m := range msgs {
				if m["id"] == l["id"] {
					msgs[i], replaced = l, true
				}
			}
			if !replaced {
				msgs = append(msgs, l)
			}
		}
	}
	var src source
	for _, m := range msgs {
		switch m["type"] {
		case "user":
			src.items = append(src.items, srcItem{user: true})
		case "gemini":
			var it srcItem
			var res srcItem
			for _, tc := range a(m["toolCalls"]) {
				it.calls = append(it.calls, s(o(tc)["id"]))
				if o(tc)["result"] != nil {
					res.results = append(res.results, s(o(tc)["id"]))
				}
			}
			src.items = append(src.items, it, res)
		}
	}
	return src
}

// openHandsSource reads an OpenHands events directory: the path from the
// last event through parent_id.
func openHandsSource(t *testing.T, dir string) source {
	files, err := filepath.Glob(filepath.Join(dir, "events", "event-*.json"))
	require.NoError(t, err)
	sort.Strings(files)
	byID := map[string]obj{}
	var events []obj
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		var e obj
		require.NoError(t, json.Unmarshal(data, &e))
		byID[s(e["id"])] = e
		events = append(events, e)
	}
	on := map[string]bool{}
	for cur := events[len(events)-1]; cur != nil; cur = byID[s(cur["parent_id"])] {
		on[s(cur["id"])] = true
	}
	var src source
	for _, e := range events {
		if !on[s(e["id"])] {
			continue
		}
		var it srcItem
		switch e["kind"] {
		case "MessageEvent":
			it.user = o(e["llm_message"])["role"] == "user"
		case "ActionEvent":
			it.calls = []string{s(o(e["tool_call"])["id"])}
		case "ObservationEvent", "AgentErrorEvent", "UserRejectObservation":
			it.results = []string{s(e["tool_call_id"])}
		case "Condensation":
			it.compaction = true
		default:
			continue
		}
		src.items = append(src.items, it)
	}
	return src
}
