package importer

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/record"
)

// RewindID is the start of the ID of a compaction Rewind makes: such an
// ID is never one of a source's own.
const RewindID = "rewind:"

// Rewind returns a compaction record whose messages are the
// conversation of t's first n records: what a tool continues from after
// it rewound past records a session already holds (its fork). Published
// after them, it makes the session's context follow the tool while the
// stream keeps every record. id tells this rewind from others (the
// importer's publisher uses the fork and the session's last sequence); abandoned is how many records
// it abandons, kept in importedFrom. The fields no tool stores are
// filled as for the tools' own compactions.
func Rewind(t *Transcript, n int, id string, abandoned int) (Record, error) {
	if n < 0 || n > len(t.Records) {
		return Record{}, fmt.Errorf("rewind to record %d of %d", n, len(t.Records))
	}
	where := "the start"
	if n > 0 {
		where = t.Records[n-1].Where
	}
	c := checkpoint{
		format:  t.Format,
		where:   where,
		summary: fmt.Sprintf("The conversation was rewound: it goes on from %s.", where),
		source:  record.NewMap("rewind", true, "abandoned", int64(abandoned)),
	}
	for i := range t.Records[:n] {
		r := &t.Records[i]
		switch r.Class() {
		case "metadata":
		case "compaction":
			// Only the latest compaction counts: its messages replace
			// what came before it.
			c.messages = c.messages[:0]
			msgs, _ := r.Value().Get("messages")
			arr, _ := msgs.([]any)
			for _, v := range arr {
				if m, ok := v.(*record.Map); ok && classOf(m) != "compaction" {
					c.keep(m, nil)
				}
			}
		default:
			c.messages = append(c.messages, *r)
		}
	}
	for i := len(c.messages) - 1; i >= 0 && c.at == nil; i-- {
		if at, ok := c.messages[i].Value().String("timestamp"); ok {
			c.at = at
		}
	}
	raw, err := c.json()
	if err != nil {
		return Record{}, err
	}
	return Record{ID: RewindID + id, Where: "a rewind to " + where, class: "compaction", raw: raw}, nil
}
