package importer

import (
	"fmt"
	"slices"

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
	messages []Record
	// firstKept is the index in messages of the first message kept from
	// before the compaction (1 after a leading summary message).
	firstKept int
	before    int64 // tokens before, 0 when unknown
	after     int64 // tokens after, 0 to estimate
	// source holds fields of the source's checkpoint worth keeping (its
	// ids, trigger, details): carried, never read by ctxd.
	source *record.Map
}

// keep appends a snapshot message: its value, and its JSON when that is
// the source's own bytes (nil: encode the value).
func (c *checkpoint) keep(m *record.Map, raw []byte) {
	c.messages = append(c.messages, Record{value: m, raw: raw})
}

// keepAll appends snapshot messages known by their values.
func (c *checkpoint) keepAll(ms []*record.Map) {
	for _, m := range ms {
		c.keep(m, nil)
	}
}

// json returns the compaction record's JSON. The snapshot is encoded once,
// from the source's bytes where they are known; tokensAfter, when
// estimated, is a quarter of its length.
func (c checkpoint) json() ([]byte, error) {
	at, _ := c.at.(string)
	model := c.model
	if model == "" {
		model = string(c.format) + "/import"
	}
	arr := []byte{'['}
	for i := range c.messages {
		if i > 0 {
			arr = append(arr, ',')
		}
		b, err := c.messages[i].JSON()
		if err != nil {
			return nil, err
		}
		arr = append(arr, b...)
	}
	arr = append(arr, ']')
	after := c.after
	if after <= 0 {
		after = int64(len(arr)+3) / 4
	}
	from := record.NewMap("format", string(c.format), "where", c.where)
	if c.source != nil {
		for _, mem := range c.source.Members {
			from.Set(mem.Key, mem.Value)
		}
	}
	m := record.NewMap(
		"type", "compaction",
		"at", at,
		"baseSeq", int64(0),
		"plannerVersion", int64(0),
		"summaryModelRef", model,
		"summary", c.summary,
		"qualityAudit", "disabled",
		"messages", []any{}, // written from arr
		"firstKeptIndex", int64(c.firstKept),
		"tokensBefore", c.before,
		"tokensAfter", after,
		"importedFrom", from,
	)
	out := splice(m, map[string][]byte{"messages": arr})
	if out == nil {
		return nil, fmt.Errorf("the compaction of %s does not encode", c.where)
	}
	return out, nil
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

// grow makes room for n more records.
func (b *builder) grow(n int) {
	b.t.Records = slices.Grow(b.t.Records, n)
	if len(b.ids) == 0 {
		b.ids = make(map[string]int, n)
	}
}

// add appends a record known by its value.
func (b *builder) add(id, where string, v *record.Map) { b.addRaw(id, where, v, nil) }

// addRaw appends a record whose JSON is raw (nil: encode v).
func (b *builder) addRaw(id, where string, v *record.Map, raw []byte) {
	b.addRecord(Record{ID: id, Where: where, class: classOf(v), value: v, raw: raw})
}

// addRecord appends r. An ID met twice (a source that repeats its own ids)
// gets a "#2", "#3" suffix, so that no record of the file hides another.
func (b *builder) addRecord(r Record) {
	if n := b.ids[r.ID]; n > 0 {
		b.ids[r.ID] = n + 1
		r.ID = fmt.Sprintf("%s#%d", r.ID, n+1)
	} else {
		b.ids[r.ID] = 1
	}
	b.t.Records = append(b.t.Records, r)
	b.t.Report.record(r.class)
}

// addCheckpoint appends the compaction record of c, kept as its JSON.
func (b *builder) addCheckpoint(id, where string, c checkpoint) {
	raw, err := c.json()
	if err != nil {
		b.report().unknown(where, "%v", err)
		return
	}
	b.addRecord(Record{ID: id, Where: where, class: "compaction", raw: raw})
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
