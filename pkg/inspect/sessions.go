package inspect

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// sessionRow is a line of the sessions list.
type sessionRow struct {
	SessionRef
	Summary  Summary
	Rejected int
	Err      string
}

func (h *Handler) sessions(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	release, ok := h.load(w, r)
	if !ok {
		return
	}
	defer release()
	refs, err := h.src.Sessions(ctx)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	shown := refs[:0:0]
	for _, ref := range refs {
		if q != "" && !strings.Contains(strings.ToLower(ref.ID), strings.ToLower(q)) {
			continue
		}
		if h.allowed(r, ref.ID) {
			shown = append(shown, ref)
		}
	}
	// Recently active first.
	slices.SortFunc(shown, func(a, b SessionRef) int {
		return cmp.Or(cmp.Compare(b.LastSeq, a.LastSeq), strings.Compare(a.ID, b.ID))
	})
	n := h.opt.PageSessions
	page, err := pageOf(r, max(len(shown)-1, 0)/n)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	from := page * n // page <= len/n: no overflow
	to := min(from+n, len(shown))
	rejected := map[string]int{}
	if rj, err := h.src.Rejected(ctx); err == nil {
		for _, x := range rj {
			if x.Session != "" {
				rejected[x.Session]++
			}
		}
	}
	rows := make([]sessionRow, 0, to-from)
	for _, ref := range shown[from:to] {
		row := sessionRow{SessionRef: ref, Rejected: rejected[ref.ID]}
		if row.Summary, err = h.summary(ctx, ref); err != nil {
			row.Err = err.Error()
		}
		rows = append(rows, row)
	}
	data := map[string]any{"Title": "sessions", "Q": q, "Rows": rows, "Total": len(shown), "Page": page}
	if page > 0 {
		data["Prev"] = pageURL(q, page-1)
	}
	if to < len(shown) {
		data["Next"] = pageURL(q, page+1)
	}
	h.render(w, r, "sessions", data)
}

// summary returns a session's summary for the sessions list: the one
// the service gave before when it covers the session's last record, else
// a new one. A summary sizes the whole context, hundreds of MiB for a
// session of screenshots, so a list loaded again asks again only for the
// sessions that moved.
func (h *Handler) summary(ctx context.Context, ref SessionRef) (Summary, error) {
	h.mu.Lock()
	s, ok := h.sums[ref.ID]
	h.mu.Unlock()
	if ok && s.Seq == ref.LastSeq {
		return s, nil
	}
	s, err := h.src.Summary(ctx, ref.ID)
	if err != nil || s.Seq != ref.LastSeq {
		return s, err // not applied that far yet: asked again next time
	}
	h.mu.Lock()
	if len(h.sums) >= maxSummaries {
		clear(h.sums) // sessions no longer listed
	}
	h.sums[ref.ID] = s
	h.mu.Unlock()
	return s, nil
}

// maxSummaries bounds the summaries held for the sessions list, a few
// dozen bytes each.
const maxSummaries = 4096

func pageURL(q string, page int) string {
	v := url.Values{}
	if q != "" {
		v.Set("q", q)
	}
	v.Set("page", strconv.Itoa(page))
	return "?" + v.Encode()
}
