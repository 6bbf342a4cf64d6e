package projection

import (
	"strings"
	"time"
	"unicode"

	"github.com/ctxd/ctxd/pkg/record"
)

// IsValidCompaction reports whether v is a valid compaction checkpoint
// (CONTEXT.md section 4).
func IsValidCompaction(v any) bool {
	m, ok := v.(*record.Map)
	if !ok {
		return false
	}
	if !hasString(m, "type", "compaction") {
		return false // most records: a quick look, not a switch on every member
	}
	var typ, at, ref, summary, audit, messages, firstKept, before, after, base, planner any
	var handover, auditMap any
	hasHandover, hasAudit := false, false
	for _, mem := range m.Members {
		switch mem.Key {
		case "type":
			typ = mem.Value
		case "at":
			at = mem.Value
		case "baseSeq":
			base = mem.Value
		case "plannerVersion":
			planner = mem.Value
		case "summaryModelRef":
			ref = mem.Value
		case "summary":
			summary = mem.Value
		case "qualityAudit":
			audit = mem.Value
		case "messages":
			messages = mem.Value
		case "firstKeptIndex":
			firstKept = mem.Value
		case "tokensBefore":
			before = mem.Value
		case "tokensAfter":
			after = mem.Value
		case "handover":
			handover, hasHandover = mem.Value, true
		case "audit":
			auditMap, hasAudit = mem.Value, true
		}
	}
	if typ != "compaction" {
		return false
	}
	if _, ok := at.(string); !ok {
		return false
	}
	if !record.IsInteger(base) || !record.IsInteger(planner) {
		return false
	}
	if _, ok := ref.(string); !ok {
		return false
	}
	if _, ok := summary.(string); !ok {
		return false
	}
	if audit != "passed" && audit != "disabled" {
		return false
	}
	if _, ok := messages.([]any); !ok {
		return false
	}
	if !record.IsNumber(firstKept) || !record.IsNumber(before) || !record.IsNumber(after) {
		return false
	}
	if _, ok := handover.(*record.Map); hasHandover && !ok {
		return false
	}
	if _, ok := auditMap.(*record.Map); hasAudit && !ok {
		return false
	}
	return true
}

// hasString reports whether some member of m is key with the string v.
func hasString(m *record.Map, key, v string) bool {
	for i := range m.Members {
		if s, ok := m.Members[i].Value.(string); ok && s == v && m.Members[i].Key == key {
			return true
		}
	}
	return false
}

// classify applies pass 1 to one record. A valid compaction returns its
// snapshot messages, already converted, and reset true; any other record
// returns the message it contributes, or nil.
func classify(v any) (msg *record.Map, snapshot []*record.Map, reset bool) {
	m, ok := v.(*record.Map)
	if !ok {
		return nil, nil, false // rule 6: not a map
	}
	kind, role, typ := keyFields(m)
	if typ == "compaction" && IsValidCompaction(m) {
		raw, _ := m.Get("messages")
		elems := raw.([]any)
		snapshot = make([]*record.Map, 0, len(elems))
		for _, e := range elems {
			if IsValidCompaction(e) {
				continue // a nested checkpoint is dropped
			}
			if c := Convert(e); c != nil {
				snapshot = append(snapshot, c)
			}
		}
		return nil, snapshot, true
	}
	return convertMap(m, kind, role, typ), nil, false
}

// keyFields reads the fields pass 1 decides on, in one scan.
func keyFields(m *record.Map) (kind, role, typ any) {
	for i := range m.Members {
		switch mem := &m.Members[i]; mem.Key {
		case "kind":
			kind = mem.Value
		case "role":
			role = mem.Value
		case "type":
			typ = mem.Value
		}
	}
	return kind, role, typ
}

// Convert applies rules 2 to 6 of pass 1 to one value: it returns the
// message the value contributes to the context, or nil when it contributes
// none. A message that passes through is returned as is, not copied.
func Convert(v any) *record.Map {
	m, ok := v.(*record.Map)
	if !ok {
		return nil // rule 6: not a map
	}
	kind, role, typ := keyFields(m)
	return convertMap(m, kind, role, typ)
}

func convertMap(m *record.Map, kind, role, typ any) *record.Map {
	switch ruleOf(kind, role, typ) {
	case ruleShell:
		return convertShell(m)
	case ruleExtension:
		return convertExtension(m) // a user or an assistant message
	case rulePassThrough:
		return m
	}
	return nil // ruleContext, ruleOther
}

// passRule is the rule of pass 1 (CONTEXT.md section 2, rules 2 to 6)
// that decides a map record which is not a valid compaction.
type passRule uint8

const (
	ruleOther       passRule = iota // rule 6: dropped without error
	ruleContext                     // rule 2: kind "context", dropped
	ruleShell                       // rule 3: a local shell run
	ruleExtension                   // rule 4: an extension message
	rulePassThrough                 // rule 5: a message role, unchanged
)

// ruleOf picks the first of rules 2 to 5 that matches, else rule 6.
func ruleOf(kind, role, typ any) passRule {
	switch {
	case kind == "context":
		return ruleContext
	case role == "bashExecution":
		return ruleShell
	case role == "custom" || typ == "custom_message":
		return ruleExtension
	}
	switch role {
	case "user", "assistant", "system", "tool", "toolResult":
		return rulePassThrough
	}
	return ruleOther
}

// converted builds a message of role with the record's timestamp.
func converted(role string, content []any, src *record.Map) *record.Map {
	out := &record.Map{Members: make([]record.Member, 0, 3)}
	out.Members = append(out.Members,
		record.Member{Key: "role", Value: role},
		record.Member{Key: "content", Value: content})
	ts, _ := src.Get("timestamp")
	if t, ok := convertTimestamp(ts); ok {
		out.Members = append(out.Members, record.Member{Key: "timestamp", Value: t})
	}
	return out
}

func textBlock(text string) *record.Map {
	return &record.Map{Members: []record.Member{
		{Key: "type", Value: "text"},
		{Key: "text", Value: text},
	}}
}

// convertExtension implements section 2.2.
func convertExtension(m *record.Map) *record.Map {
	c, _ := m.Get("content")
	var content []any
	switch x := c.(type) {
	case string:
		content = []any{textBlock(x)}
	case []any:
		content = x
	default:
		content = []any{textBlock("")}
	}
	return converted(extensionRole(m), content, m)
}

// extensionRole is the role of an extension message: "assistant" when
// its details is a map whose role is the string "assistant" (the
// assistant's own words, such as a transcript of its spoken reply),
// "user" otherwise.
func extensionRole(m *record.Map) string {
	d, _ := m.Get("details")
	if dm, ok := d.(*record.Map); ok {
		if r, _ := dm.String("role"); r == "assistant" {
			return "assistant"
		}
	}
	return "user"
}

// convertShell implements section 2.1.
func convertShell(m *record.Map) *record.Map {
	ex, _ := m.Get("excludeFromContext")
	ex2, _ := m.Get("excludedFromContext")
	if record.IsTrue(ex) || record.IsTrue(ex2) {
		return nil
	}
	cmd, _ := m.String("command")
	cmd = strings.TrimSpace(cmd)
	if cmd == "" {
		return nil
	}
	return converted("user", []any{textBlock(ShellText(m, cmd))}, m)
}

// ShellText renders a local shell run in the <local_shell> format of
// CONTEXT.md section 2.1; command is already trimmed.
func ShellText(m *record.Map, command string) string {
	code := "?"
	if c, _ := m.Get("exitCode"); c != nil {
		if s, ok := record.IntegerString(c); ok {
			code = s
		}
	}
	output := ""
	switch o, _ := m.Get("output"); x := o.(type) {
	case string:
		output = x
	case []any:
		var b strings.Builder
		for _, e := range x {
			blk, ok := e.(*record.Map)
			if !ok {
				continue
			}
			if t, _ := blk.Get("type"); t != "text" {
				continue
			}
			if s, ok := blk.String("text"); ok {
				b.WriteString(s)
			}
		}
		output = b.String()
	}
	var b strings.Builder
	b.Grow(len(command) + len(output) + 64)
	b.WriteString("<local_shell>\n$ ")
	b.WriteString(command)
	b.WriteString("\nexit=")
	b.WriteString(code)
	if sig, ok := m.String("signal"); ok && sig != "" {
		b.WriteString(" signal=")
		b.WriteString(sig)
	}
	if output == "" {
		b.WriteString("\noutput: (empty)\n")
	} else {
		b.WriteString("\noutput:\n")
	}
	b.WriteString(strings.TrimRightFunc(output, unicode.IsSpace))
	b.WriteString("\n")
	if t, _ := m.Get("truncated"); record.IsTrue(t) {
		b.WriteString("\n[output truncated]")
	}
	b.WriteString("</local_shell>")
	return b.String()
}

// convertTimestamp implements section 2.3: numbers are kept as they are,
// RFC 3339 date-times become Unix milliseconds, anything else is absent.
func convertTimestamp(v any) (any, bool) {
	switch x := v.(type) {
	case int64, uint64, float64, record.Number:
		return x, true
	case string:
		if ms, ok := ParseTimestamp(x); ok {
			return ms, true
		}
	}
	return nil, false
}

// ParseTimestamp reads YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)
// naming a real instant and returns it in Unix milliseconds, rounded
// toward the past.
func ParseTimestamp(s string) (int64, bool) {
	// Fixed part: 2006-01-02T15:04:05
	if len(s) < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return 0, false
	}
	year, ok1 := digitsAt(s, 0, 4)
	month, ok2 := digitsAt(s, 5, 2)
	day, ok3 := digitsAt(s, 8, 2)
	hour, ok4 := digitsAt(s, 11, 2)
	minute, ok5 := digitsAt(s, 14, 2)
	sec, ok6 := digitsAt(s, 17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return 0, false
	}
	rest := s[19:]
	var millis int64
	if rest[0] == '.' {
		i := 1
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			if i <= 3 {
				millis = millis*10 + int64(rest[i]-'0')
			}
			i++
		}
		if i == 1 {
			return 0, false
		}
		for j := i; j <= 3; j++ {
			millis *= 10
		}
		rest = rest[i:]
	}
	var offset int
	switch {
	case rest == "Z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, ok1 := digitsAt(rest, 1, 2)
		om, ok2 := digitsAt(rest, 4, 2)
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return 0, false
		}
		offset = oh*3600 + om*60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return 0, false
	}
	if month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return 0, false
	}
	if day > daysIn(year, month) {
		return 0, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC)
	return (t.Unix()-int64(offset))*1000 + millis, true
}

func daysIn(year, month int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

func digitsAt(s string, at, n int) (int, bool) {
	v := 0
	for i := at; i < at+n; i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}
