package importer

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/record"
)

// checkpoint is a compaction found in a source, to become a valid ctxd
// compaction record (CONTEXT.md section 4). No source stores every field
// ctxd requires; the others are filled the same way for every format:
// plannerVersion 0 (imported), qualityAudit "disabled", baseSeq 0 (an
// import cannot know stream sequences), and tokensAfter estimated at four
// characters a token when the source does not say.
type checkpoint struct {
	format  Format
	where   string
	at      any    // the source's timestamp; a non-string becomes ""
	summary string // the summary text as the source stores it
	model   string // the summarising model when known
	// messages is the snapshot: converted records, in order.
	messages []*record.Map
	// firstKept is the index in messages of the first message kept from
	// before the compaction (1 after a leading summary message).
	firstKept int
	before    int64 // tokens before, 0 when unknown
	after     int64 // tokens after, 0 to estimate
	// source holds fields of the source's checkpoint worth keeping (its
	// ids, trigger, details): carried, never read by ctxd.
	source *record.Map
}

func (c checkpoint) record() *record.Map {
	at, _ := c.at.(string)
	model := c.model
	if model == "" {
		model = string(c.format) + "/import"
	}
	msgs := make([]any, len(c.messages))
	for i, m := range c.messages {
		msgs[i] = m
	}
	after := c.after
	if after <= 0 {
		after = estimateTokens(msgs)
	}
	from := record.NewMap("format", string(c.format), "where", c.where)
	if c.source != nil {
		for _, mem := range c.source.Members {
			from.Set(mem.Key, mem.Value)
		}
	}
	return record.NewMap(
		"type", "compaction",
		"at", at,
		"baseSeq", int64(0),
		"plannerVersion", int64(0),
		"summaryModelRef", model,
		"summary", c.summary,
		"qualityAudit", "disabled",
		"messages", msgs,
		"firstKeptIndex", int64(c.firstKept),
		"tokensBefore", c.before,
		"tokensAfter", after,
		"importedFrom", from,
	)
}

// estimateTokens guesses a token count at four characters of JSON a token.
func estimateTokens(v any) int64 {
	b, err := record.MarshalJSON(v)
	if err != nil {
		return 0
	}
	return int64(len(b)+3) / 4
}

// builder collects a transcript's records.
type builder struct {
	t   *Transcript
	ids map[string]int
}

func newBuilder(source, session string) *builder {
	return &builder{t: &Transcript{Source: source, Session: session}, ids: map[string]int{}}
}

func (b *builder) report() *Report { return &b.t.Report }

// add appends a record. An ID met twice (a source that repeats its own ids)
// gets a "#2", "#3" suffix, so that no record of the file hides another.
func (b *builder) add(id, where string, v *record.Map) { b.addRaw(id, where, v, nil) }

// addRaw appends a record whose JSON is raw (nil: encode v).
func (b *builder) addRaw(id, where string, v *record.Map, raw []byte) {
	if n := b.ids[id]; n > 0 {
		b.ids[id] = n + 1
		id = fmt.Sprintf("%s#%d", id, n+1)
	} else {
		b.ids[id] = 1
	}
	b.t.Records = append(b.t.Records, Record{ID: id, Where: where, Value: v, raw: raw})
	b.t.Report.record(classOf(v))
}

// snapshotOf keeps the records that are messages: metadata in a snapshot
// would be dropped by ctxd anyway.
func snapshotOf(recs []*record.Map) []*record.Map {
	out := make([]*record.Map, 0, len(recs))
	for _, m := range recs {
		if c := classOf(m); c != "metadata" && c != "compaction" {
			out = append(out, m)
		}
	}
	return out
}
