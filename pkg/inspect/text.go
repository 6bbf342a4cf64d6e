package inspect

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the view for a terminal: a line per stored record
// (sequence, class, size, status, rule) beside the context messages it
// gives, compaction checkpoints as dividers, then the dropped report.
// Record content is cut and stripped of control characters.
func WriteText(w io.Writer, v *View) error {
	at := "latest"
	if v.At != 0 {
		at = fmt.Sprintf("as at seq %d", v.At)
	}
	s := v.Summary
	fmt.Fprintf(w, "session %s (%s): %d records, last seq %d\n", v.Session, at, len(v.Rows), v.Seq)
	fmt.Fprintf(w, "context: %d messages, %d bytes, ~%d tokens; images %d kept, %d omitted; %d unpaired calls, %d orphan results\n\n",
		s.Messages, s.Bytes, s.Tokens, s.ImagesKept, s.ImagesOmitted, s.UnpairedCalls, s.OrphanResults)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tCLASS\tSIZE\tSTATUS\tRULE\t| CONTEXT")
	for _, r := range v.Rows {
		if r.Class == "compaction" {
			fmt.Fprintf(tw, "----\t----\t----\t----\tcompaction checkpoint at seq %d\t|\n", r.Seq)
		}
		ctx := ""
		if r.Messages > 0 {
			ctx = fmt.Sprintf("[%d] %s", r.First, oneLine(v.Messages[r.First], 70))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t| %s\n", r.Seq, clean(r.Class, 24), r.Size, r.Status, clean(r.Rule, 80), ctx)
		for i := 1; i < r.Messages; i++ {
			fmt.Fprintf(tw, "\t\t\t\t\t| [%d] %s\n", r.First+i, oneLine(v.Messages[r.First+i], 70))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	d := v.Dropped
	fmt.Fprintf(w, "\ndropped: %d unpaired calls, %d orphan results, %d images omitted\n", len(d.UnpairedCalls), len(d.OrphanResults), d.ImagesOmitted)
	for _, c := range d.UnpairedCalls {
		fmt.Fprintf(w, "  unpaired call %s at seq %d\n", clean(describe(c.ID, c.Tool), 120), c.Seq)
	}
	for _, o := range d.OrphanResults {
		fmt.Fprintf(w, "  orphan result %s at seq %d\n", clean(describe(o.ID, ""), 120), o.Seq)
	}
	_, err := io.WriteString(w, "")
	return err
}

func describe(id, tool string) string {
	var b strings.Builder
	if id == "" {
		b.WriteString("(no id)")
	} else {
		fmt.Fprintf(&b, "%q", id)
	}
	if tool != "" {
		fmt.Fprintf(&b, " (%s)", tool)
	}
	return b.String()
}
