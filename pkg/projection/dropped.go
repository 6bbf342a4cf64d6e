package projection

import "github.com/ctxd/ctxd/pkg/record"

// Map returns the report as a record value, as replies and ctxd build
// carry it: {"unpaired_calls": [{"id", "tool", "seq"}], "orphan_results":
// [{"id", "seq"}], "images_omitted": N}, the lists empty rather than null.
func (d Dropped) Map() *record.Map {
	calls := make([]any, len(d.UnpairedCalls))
	for i, c := range d.UnpairedCalls {
		calls[i] = record.NewMap("id", c.ID, "tool", c.Tool, "seq", c.Seq)
	}
	orphans := make([]any, len(d.OrphanResults))
	for i, o := range d.OrphanResults {
		orphans[i] = record.NewMap("id", o.ID, "seq", o.Seq)
	}
	return record.NewMap("unpaired_calls", calls, "orphan_results", orphans, "images_omitted", int64(d.ImagesOmitted))
}
