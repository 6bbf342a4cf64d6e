package inspect

import (
	"cmp"
	"net/http"
	"slices"

	"github.com/ctxd/ctxd/pkg/projection"
)

// fate is a record's fate as a follow update sends it.
type fate struct {
	Seq    uint64
	Status projection.Status
	Rule   string
}

// followUpdate answers a followed page with what it lacks: the records
// after the last it shows (those of the latest page at most: past that,
// More asks it to load again), the fates now of those it shows from
// from on (a later record can change them: a call paired, a screenshot
// trimmed) and the summary.
func (h *Handler) followUpdate(w http.ResponseWriter, r *http.Request, pv *pageView, after, from uint64) {
	v := pv.View
	i, _ := slices.BinarySearchFunc(v.Rows, after+1, func(r Row, seq uint64) int { return cmp.Compare(r.Seq, seq) })
	k, _ := slices.BinarySearchFunc(pv.Rows, after+1, func(r recordRow, seq uint64) int { return cmp.Compare(r.Seq, seq) })
	fresh := pv.Rows[k:]
	more := len(v.Rows)-i > len(fresh)
	if more {
		fresh = nil
	}
	j, _ := slices.BinarySearchFunc(v.Rows[:i], from, func(r Row, seq uint64) int { return cmp.Compare(r.Seq, seq) })
	var fates []fate
	for _, row := range v.Rows[max(j, i-h.opt.PageRecords):i] {
		fates = append(fates, fate{Seq: row.Seq, Status: row.Status, Rule: cut(row.Rule, ruleBytes)})
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	data := map[string]any{"View": v, "Rows": fresh, "Fates": fates, "More": more, "Prefix": h.opt.Prefix,
		"Base": pv.Base, "Conv": pv.Conv, "ConvHidden": pv.ConvHidden}
	if err := h.tmpl["follow"].ExecuteTemplate(w, "follow", data); err != nil {
		h.opt.Logger.Warn("inspector template failed", "page", "follow", "err", err)
	}
}
