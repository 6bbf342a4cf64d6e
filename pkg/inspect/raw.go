package inspect

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

// recordOf reads the record at the path's sequence, which must belong to
// the session: a sequence of another session is not found, so no path
// shows a record of a session the request may not see.
func (h *Handler) recordOf(w http.ResponseWriter, r *http.Request, id string) ([]byte, bool) {
	seq, err := seqOf(r)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, err)
		return nil, false
	}
	subj, data, err := h.src.Record(r.Context(), seq)
	if err != nil {
		h.fail(w, r, http.StatusNotFound, err)
		return nil, false
	}
	if sid, _, err := subject.SessionOfStored(subj); err != nil || sid != id {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("session %s has no record at seq %d", id, seq))
		return nil, false
	}
	return data, true
}

func (h *Handler) rawRecord(w http.ResponseWriter, r *http.Request) {
	id, ok := h.sessionOf(w, r)
	if !ok {
		return
	}
	data, ok := h.recordOf(w, r, id)
	if !ok {
		return
	}
	serveRaw(w, r.PathValue("seq"), data)
}

// serveRaw serves a stored record as it is: JSON as text the browser
// shows, anything else as a download. Neither is ever run as a page.
func serveRaw(w http.ResponseWriter, seq string, data []byte) {
	if record.IsJSON(data) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="record-`+seq+`.msgpack"`)
	}
	w.Header().Set("Cache-Control", "private, max-age=3600")
	w.Write(data)
}

func (h *Handler) thumb(w http.ResponseWriter, r *http.Request) {
	id, ok := h.sessionOf(w, r)
	if !ok {
		return
	}
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("%q is not an image number", cut(r.PathValue("n"), 40)))
		return
	}
	select {
	case h.thumbs <- struct{}{}:
		defer func() { <-h.thumbs }()
	case <-r.Context().Done():
		return
	}
	data, ok := h.recordOf(w, r, id)
	if !ok {
		return
	}
	w.Header().Set("Cache-Control", "private, max-age=3600")
	v, err := h.opt.Config.Limits.Decoder().Decode(data)
	if err != nil {
		servePlaceholder(w, "record not decoded")
		return
	}
	var img *inline
	k := 0
	walkImages(v, func(_ *record.Map, im inline) {
		if k == n {
			img = &im
		}
		k++
	})
	switch {
	case img == nil:
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("no image %d in the record", n))
	case img.data == "":
		servePlaceholder(w, "image without inline data")
	default:
		png, err := thumbnail(img.data, MaxThumbnailSource)
		if err != nil {
			servePlaceholder(w, err.Error())
			return
		}
		w.Header().Set("Content-Type", "image/png")
		w.Write(png)
	}
}

func servePlaceholder(w http.ResponseWriter, why string) {
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Write(placeholder(why))
}
