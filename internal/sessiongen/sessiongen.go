// Package sessiongen generates random sessions of records for the tests
// of the projection and of what is built on it: every shape a record can
// take under docs/CONTEXT.md, hostile ones included, with the pairing and
// compaction corner cases made frequent.
//
// sessiongen.go holds Gen and Record, which picks a shape of record; each
// group of shapes has a file: messages.go (user, system and assistant
// messages), blocks.go (their content blocks and ids), results.go (tool
// results), extensions.go (shell runs and extension messages),
// compaction.go (valid and invalid compactions), irregular.go (metadata,
// values that are not maps, repeats) and browsing.go (Browsing: sessions
// of browser screenshots).
package sessiongen

import (
	"math/rand/v2"

	"github.com/ctxd/ctxd/pkg/record"
)

// Gen generates realistic random sessions: the records an agent runtime
// stores, with the irregularities real transcripts have (calls never
// answered, results for unknown ids, duplicates, checkpoints, rows of
// metadata, values that are not maps). Ids come from a small pool so that
// the pairing corner cases of CONTEXT.md section 3 happen often.
//
// A Gen is deterministic: the same *rand.Rand state gives the same
// session. Each shape of record has its own method, named for the shape.
type Gen struct {
	r     *rand.Rand
	rules Rules

	// calls are the calls made so far, oldest first: results answer them,
	// usually soon, sometimes long after.
	calls []genCall
	// history holds the message-like records so far, the material a
	// compaction snapshot keeps.
	history []any
	// depth is the compaction nesting of the record being generated.
	depth int
	// unique numbers the ids that collide with nothing.
	unique int
}

type genCall struct {
	id, tool string
}

// idPool is small on purpose: ids collide often.
var idPool = []string{"c1", "c2", "c3", "c4", "c5", "b1", "b2"}

// toolNames mixes the default browser tool, a tool that only some Options
// treat as a browser tool, and ordinary tools.
var toolNames = []string{"browser_use", "browser_use", "browser_use", "screenshot", "bash", "read", "edit", "web_search"}

// Rules are what the generator needs of the context rules, from package
// projection, which cannot be imported here: its own tests use this
// package.
type Rules struct {
	// Convert is pass 1 for one record: the message it becomes, or nil.
	Convert func(v any) *record.Map
	// IsValidCompaction reports a valid compaction (CONTEXT.md section 4).
	IsValidCompaction func(v any) bool
}

// New returns a generator drawing from r.
func New(r *rand.Rand, rules Rules) *Gen { return &Gen{r: r, rules: rules} }

// BrowserTools picks the browser tool set a session is projected with
// (projection.Options.BrowserTools); nil is the default set.
func (g *Gen) BrowserTools() []string {
	switch g.r.IntN(10) {
	case 0:
		return []string{"browser_use", "screenshot"}
	case 1:
		return []string{} // nothing is trimmed
	case 2:
		return []string{"bash"}
	case 3:
		// A call without a string name has tool "": listed, it is a
		// browser call too.
		return []string{"", "browser_use"}
	}
	return nil
}

// Session returns n records.
func (g *Gen) Session(n int) []any {
	out := make([]any, 0, n)
	for len(out) < n {
		out = append(out, g.Record())
	}
	return out
}

// Record returns one record of a random shape, weighted roughly like a
// real session: mostly calls and results, some talk, a little of the rest.
func (g *Gen) Record() any {
	shapes := []struct {
		weight int
		make   func() any
	}{
		{8, g.userText},
		{4, g.userBlocks},
		{6, g.assistantText},
		{3, g.assistantEmpty},
		{14, g.assistantCalls},
		{6, g.assistantOpenAI},
		{2, g.system},
		{14, g.toolResult},
		{8, g.anthropicResults},
		{5, g.shellRun},
		{4, g.extension},
		{5, g.assistantExtension},
		{6, g.metadata},
		{2, g.compaction},
		{2, g.invalidCompaction},
		{2, g.nonMap},
		{3, g.repeat},
		{2, g.recall},
		{1, g.misplacedCall},
	}
	total := 0
	for _, s := range shapes {
		total += s.weight
	}
	n := g.r.IntN(total)
	for _, s := range shapes {
		if n < s.weight {
			v := s.make()
			if m, ok := v.(*record.Map); ok && g.rules.Convert(m) != nil {
				g.history = append(g.history, v)
			}
			return v
		}
		n -= s.weight
	}
	panic("unreachable")
}

// chance reports true with probability 1/n.
func (g *Gen) chance(n int) bool { return g.r.IntN(n) == 0 }

func pick[T any](g *Gen, xs ...T) T { return xs[g.r.IntN(len(xs))] }

// message builds a map from key, value pairs and gives it a timestamp in
// some form most of the time.
func (g *Gen) message(kv ...any) *record.Map {
	m := record.NewMap(kv...)
	if !g.chance(4) {
		m.Set("timestamp", g.timestamp())
	}
	if g.chance(150) {
		// Valid JSON, but beyond float64: the message has no msgpack form.
		m.Set("usage", record.NewMap("cost", record.Number(pick(g, "1E400", "-1e999"))))
	}
	return m
}

// timestamp returns a timestamp in any of the forms records carry: Unix
// milliseconds in every number representation, RFC 3339 strings with and
// without fractions and offsets, before 1970, and values that are not
// timestamps at all.
func (g *Gen) timestamp() any {
	switch g.r.IntN(6) {
	case 0:
		return int64(1764493200000 + g.r.IntN(1e6))
	case 1:
		return pick[any](g, 1764493200000.5, float64(1.7e12), record.Number("1.7E12"),
			record.Number("1764493200000.0"), uint64(1<<63), int64(-1))
	case 2, 3:
		return pick(g,
			"2025-11-30T09:00:05Z",
			"2025-11-30T09:00:05.123Z",
			"2025-11-30T09:00:05.123456789Z",
			"2025-11-30T09:00:05.9+05:30",
			"2025-11-30T09:00:05-08:00",
			"1969-12-31T23:59:59.999Z",
			"1960-01-01T00:00:00.5Z",
			"2024-02-29T12:00:00Z",
			"0001-01-01T00:00:00Z",
		)
	case 4:
		return pick(g,
			"2025-11-30T09:00:05",       // no offset
			"2025-11-30",                // a date only
			"2025-11-30 09:00:05Z",      // a space for T
			"2025-13-01T00:00:00Z",      // month 13
			"2023-02-29T00:00:00Z",      // not a leap year
			"2025-11-30t09:00:05z",      // lower case
			"2025-11-30T09:00:60Z",      // a leap second
			"2025-11-30T09:00:05.Z",     // a fraction without digits
			"2025-11-30T09:00:05+24:00", // an offset out of range
			"yesterday",
			"",
		)
	}
	return pick[any](g, nil, true, []any{}, record.NewMap("ms", int64(1)))
}

func (g *Gen) remember(id any, tool any) {
	s, ok := id.(string)
	if !ok || s == "" {
		return
	}
	name, _ := tool.(string)
	g.calls = append(g.calls, genCall{id: s, tool: name})
}

// firstStringOf is the id a call block has per section 3.
func firstStringOf(b *record.Map) any {
	for _, k := range []string{"id", "toolCallId", "tool_call_id", "tool_call_id$"} {
		if s, ok := b.String(k); ok {
			return s
		}
	}
	return nil
}

// deepCopy copies a record value, so that a repeated record shares no
// memory with the original, as a redelivered record would not.
func deepCopy(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	case *record.Map:
		out := &record.Map{Members: make([]record.Member, len(x.Members))}
		for i, m := range x.Members {
			out.Members[i] = record.Member{Key: m.Key, Value: deepCopy(m.Value)}
		}
		return out
	}
	return v
}

// toolCallName is a tool_calls entry's tool name (CONTEXT.md section 5).
func toolCallName(e *record.Map) string {
	if f, ok := e.Get("function"); ok {
		if fm, ok := f.(*record.Map); ok {
			if n, ok := fm.String("name"); ok {
				return n
			}
		}
	}
	n, _ := e.String("name")
	return n
}
