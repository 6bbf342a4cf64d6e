package inspect

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// rejectedRow is a line of the rejected list.
type rejectedRow struct {
	store.Rejection
	Valid bool // Session is a valid session id, linked to its page
}

func (h *Handler) visibleRejections(r *http.Request) ([]rejectedRow, error) {
	rj, err := h.src.Rejected(r.Context())
	if err != nil {
		return nil, err
	}
	rows := make([]rejectedRow, 0, len(rj))
	for _, x := range rj {
		if !h.allowed(r, x.Session) {
			continue
		}
		rows = append(rows, rejectedRow{Rejection: x, Valid: x.Session != "" && subject.CheckSession(x.Session) == nil})
	}
	return rows, nil
}

func (h *Handler) rejected(w http.ResponseWriter, r *http.Request) {
	rows, err := h.visibleRejections(r)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	slices.Reverse(rows) // newest first
	h.render(w, r, "rejected", map[string]any{"Title": "rejected records", "Rows": rows})
}

// rawRejected serves a rejected record: only one the rejected list holds
// and the request may see.
func (h *Handler) rawRejected(w http.ResponseWriter, r *http.Request) {
	seq, err := seqOf(r)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, err)
		return
	}
	rows, err := h.visibleRejections(r)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, err)
		return
	}
	if !slices.ContainsFunc(rows, func(x rejectedRow) bool { return x.Seq == seq }) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no rejected record at seq %d", seq))
		return
	}
	_, data, err := h.src.Record(r.Context(), seq)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, err)
		return
	}
	serveRaw(w, r.PathValue("seq"), data)
}
