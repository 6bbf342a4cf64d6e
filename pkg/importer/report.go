package importer

import (
	"fmt"
	"sort"
	"strings"
)

// Report says what a conversion did with a file's entries.
type Report struct {
	// Entries is the number of source entries read (lines, messages or
	// event files).
	Entries int
	// Records counts the records produced, by class (Record.Class).
	Records map[string]int
	// Metadata counts the source entries skipped because they never reach
	// the model (titles, hooks, token counts, UI state), by source type.
	Metadata map[string]int
	// Abandoned counts the messages left out because they are on a branch
	// the conversation left (a rewind, a rollback).
	Abandoned int
	// Unknown lists the entries not understood, which were skipped.
	Unknown []Note
	// Approximations lists what was converted with a loss or a guess.
	Approximations []Note
}

// Note is one reported entry: where it is in the file and what about it.
type Note struct {
	Where string // "line 12", "message 3", an event file
	Text  string // for an unknown entry, its type and why
	Count int    // how many times it was met at Where, at least 1
}

// String formats a note as "WHERE: TEXT", with "(N times)" when it
// repeats.
func (n Note) String() string {
	if n.Count > 1 {
		return fmt.Sprintf("%s: %s (%d times)", n.Where, n.Text, n.Count)
	}
	return fmt.Sprintf("%s: %s", n.Where, n.Text)
}

func (r *Report) record(class string) {
	if r.Records == nil {
		r.Records = map[string]int{}
	}
	r.Records[class]++
}

func (r *Report) metadata(typ string) {
	if r.Metadata == nil {
		r.Metadata = map[string]int{}
	}
	r.Metadata[typ]++
}

func (r *Report) unknown(where, format string, args ...any) {
	r.Unknown = note(r.Unknown, where, fmt.Sprintf(format, args...))
}

func (r *Report) approx(where, format string, args ...any) {
	r.Approximations = note(r.Approximations, where, fmt.Sprintf(format, args...))
}

// note appends a note, or counts it again when the same note was made at
// the same place.
func note(notes []Note, where, text string) []Note {
	for i := len(notes) - 1; i >= 0 && notes[i].Where == where; i-- {
		if notes[i].Text == text {
			notes[i].Count++
			return notes
		}
	}
	return append(notes, Note{where, text, 1})
}

// Total is the number of records produced.
func (r *Report) Total() int {
	n := 0
	for _, c := range r.Records {
		n += c
	}
	return n
}

// Summary writes the report as a few lines of text: counts on the first
// lines, then every unknown entry and approximation, each on its own line
// prefixed with indent.
func (r *Report) Summary(indent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s%d entries read, %d records: %s\n", indent, r.Entries, r.Total(), counts(r.Records))
	if len(r.Metadata) > 0 {
		fmt.Fprintf(&b, "%sskipped as metadata: %s\n", indent, counts(r.Metadata))
	}
	if r.Abandoned > 0 {
		fmt.Fprintf(&b, "%sleft out on abandoned branches: %d messages\n", indent, r.Abandoned)
	}
	if len(r.Unknown) > 0 {
		fmt.Fprintf(&b, "%snot understood, skipped: %d\n", indent, len(r.Unknown))
		for _, n := range r.Unknown {
			fmt.Fprintf(&b, "%s  %s\n", indent, n)
		}
	}
	if len(r.Approximations) > 0 {
		fmt.Fprintf(&b, "%sapproximated: %d\n", indent, len(r.Approximations))
		for _, n := range r.Approximations {
			fmt.Fprintf(&b, "%s  %s\n", indent, n)
		}
	}
	return b.String()
}

// counts formats a count map as "a 3, b 1", largest first.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
