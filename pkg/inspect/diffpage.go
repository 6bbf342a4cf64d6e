package inspect

import (
	"errors"
	"fmt"
	"net/http"
)

// diff answers ?at=A&diff=B: what changed in the session's context
// from the earlier of the two sequences to the later (at absent or 0 is
// the session as it is). It loads both views in one slot of MaxLoads,
// each read as a page's is, and shows the entries added, removed and
// changed and the records whose fate changed.
func (h *Handler) diff(w http.ResponseWriter, r *http.Request, id string, at uint64, base string) {
	q := r.URL.Query()
	other, err := seqParam(r, "diff", 0)
	if err == nil && other == 0 {
		err = fmt.Errorf("diff: %q is not a stream sequence (1 or more)", cut(q.Get("diff"), 40))
	}
	if err == nil && q.Has("at") && at == 0 {
		err = errors.New(`at: "0" is not a stream sequence (1 or more; leave at out for the session as it is)`)
	}
	for _, p := range []string{"after", "page", "format"} {
		if err == nil && q.Has(p) {
			err = fmt.Errorf("diff: not with %s (a diff is a page of its own; the JSON of each side is ?at=SEQ&format=json)", p)
		}
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	// From the earlier to the later; 0 (the session as it is) is the latest.
	fromName, from, toName, to := "diff", other, "at", at
	if at != 0 && at < other {
		fromName, from, toName, to = "at", at, "diff", other
	}
	release, ok := h.load(w, r)
	if !ok {
		return
	}
	defer release()
	side := func(name string, seq uint64) (*View, bool) {
		v, err := h.view(r.Context(), id, seq)
		switch {
		case errors.Is(err, ErrNoSession):
			h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%s: session %s has no records up to seq %d", name, id, seq))
			return nil, false
		case err != nil:
			h.loadFailed(w, r, err)
			return nil, false
		case v.Cut != "":
			h.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("%s: no diff: %s", name, v.Cut))
			return nil, false
		}
		return v, true
	}
	a, ok := side(fromName, from)
	if !ok {
		return
	}
	b, ok := side(toName, to)
	if !ok {
		return
	}
	d := diffViews(a, b, h.opt.PageBytes)
	bare := func(v *View) *View {
		out := *v
		out.Rows, out.Messages = nil, nil
		return &out
	}
	h.render(w, r, "diff", map[string]any{
		"Title": "session " + id + ": diff", "ID": id, "Base": base, "From": bare(a), "To": bare(b),
		"FromRecords": len(a.Rows), "ToRecords": len(b.Rows), "D": d, "At": at, "Diff": other,
	})
}
