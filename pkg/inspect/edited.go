package inspect

import (
	"fmt"
	"net/http"

	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/render"
)

// StatusEdited marks, in the conversation of a view with ?edits=, a
// message or result the edits changed.
const StatusEdited projection.Status = "edited"

// edited answers ?edits=JSON: the session's latest page with the context
// edits of docs/EDITS.md applied to its conversation, each message or
// result they changed marked with what they did. The edits estimate the
// neutral context, and tool_results needs its trigger_tokens (a page has
// no budget_tokens). The page is built for the request, like a page
// other than the latest.
func (h *Handler) edited(w http.ResponseWriter, r *http.Request, id string, at uint64, base string) {
	cfg, err := edits.ParseJSON([]byte(r.URL.Query().Get("edits")))
	if err == nil && cfg.ToolResults != nil && !cfg.ToolResults.HasTrigger {
		err = fmt.Errorf("%w: edits.tool_results.trigger_tokens is required here", edits.ErrInvalid)
	}
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("edits: %w", err))
		return
	}
	v, release, ok := h.loadView(w, r, id, at)
	if !ok {
		return
	}
	defer release()
	ev := editView(v, cfg)
	pv, err := h.pageView(r.Context(), ev, base, 0)
	if err != nil {
		h.loadFailed(w, r, err)
		return
	}
	h.renderPage(w, r, pv)
}

// editView returns a copy of v whose messages have the edits applied,
// and Edited saying what changed where. v is not modified. The edits
// keep every message in its place, so the rows' indices hold.
func editView(v *View, cfg *edits.Config) *View {
	if v.Cut != "" {
		return v
	}
	seqs := make([]uint64, len(v.Messages))
	for _, row := range v.Rows {
		for k := range row.Messages {
			if j := row.First + k; j < len(seqs) {
				seqs[j] = row.Seq
			}
		}
	}
	msgs, _, rep := edits.Apply(v.Messages, cfg, edits.Options{
		Seqs:        seqs,
		Tokens:      func(m []any) int { return render.Tokens(render.Neutral, m, render.Options{}) },
		ValueTokens: func(x any) int { return render.ValueTokens(render.Neutral, x) },
	})
	ev := *v
	ev.Messages = msgs
	ev.Edited = map[int]string{}
	note := func(i int, what string) {
		if prev, ok := ev.Edited[i]; ok && prev != what {
			what = prev + "; " + what
		}
		ev.Edited[i] = what
	}
	for _, c := range rep.Cleared {
		note(c.Message, fmt.Sprintf("edits: tool result cleared (%d tokens)", c.Tokens))
	}
	for _, t := range rep.ThinkingRemoved {
		note(t.Message, "edits: thinking removed")
	}
	for _, im := range rep.ImagesRemoved {
		note(im.Message, "edits: image replaced by the notice")
	}
	return &ev
}
