package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// recordRow is a stored record on the session page.
type recordRow struct {
	Row
	Base    string // the session page's path, for the record's links
	Preview string
	Cut     bool // the preview is not the whole record
	Images  []imageRef
	// MoreImages are the record's images past rowImages, not shown.
	MoreImages int
	Context    []contextMsg
	More       int // context messages the record gives beyond those shown
	Divider    bool
}

// droppedItem is an entry of the dropped report, linked to its record.
type droppedItem struct {
	What, ID, Tool string
	Seq            uint64
	Href           string
}

type imageRef struct {
	N         int
	InContext bool
}

type contextMsg struct {
	Index   int
	Role    string
	Preview string
}

// contextPerRow bounds the context messages a row shows: a compaction
// gives hundreds.
const contextPerRow = 20

// Bounds of the parts of a page that previews do not count: a record
// of thousands of images or unpaired calls shows rowImages thumbnails,
// a rule of ruleBytes, and the dropped list droppedItems entries.
const (
	rowImages    = 20
	ruleBytes    = 1000
	droppedItems = 200
)

// sessionURL is the path of a page of a session, as of at.
func sessionURL(base string, at uint64, page int) string {
	v := url.Values{}
	if at != 0 {
		v.Set("at", strconv.FormatUint(at, 10))
	}
	if page != 0 {
		v.Set("page", strconv.Itoa(page))
	}
	if len(v) == 0 {
		return base
	}
	return base + "?" + v.Encode()
}

func (h *Handler) session(w http.ResponseWriter, r *http.Request) {
	id, ok := h.sessionOf(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	at, err := seqParam(r, "at", 0)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	follow := q.Has("after")
	after, err := seqParam(r, "after", 0)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	from, err := seqParam(r, "from", after+1)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if q.Has("page") && follow {
		h.fail(w, r, http.StatusBadRequest, errors.New("page: not with after"))
		return
	}
	base := h.opt.Prefix + "sessions/" + url.PathEscape(id)
	if q.Has("diff") {
		h.diff(w, r, id, at, base)
		return
	}
	if q.Has("edits") {
		h.edited(w, r, id, at, base)
		return
	}
	if q.Get("format") != "json" && (follow || q.Get("page") == "" || q.Get("page") == "0") {
		// The latest page and follow updates: from the view shared by
		// every request for it, loaded once per record applied.
		pv, ok := h.latest(w, r, id, at, base)
		if !ok {
			return
		}
		if follow {
			h.followUpdate(w, r, pv, after, from)
			return
		}
		h.renderPage(w, r, pv)
		return
	}
	v, release, ok := h.loadView(w, r, id, at)
	if !ok {
		return
	}
	defer release()
	if q.Get("format") == "json" {
		out, err := v.MarshalJSON()
		if err != nil {
			h.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
		return
	}
	page, err := pageOf(r, (len(v.Rows)-1)/h.opt.PageRecords)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	pv, err := h.pageView(r.Context(), v, base, page)
	if err != nil {
		h.loadFailed(w, r, err)
		return
	}
	h.renderPage(w, r, pv)
}

// pageView is a page of a session's view, ready to render: its rows'
// previews made, and the view without the records' values, which a
// large session holds hundreds of MiB of.
type pageView struct {
	View   *View // Rows without Value, no Messages
	Base   string
	Page   int
	Rows   []recordRow
	Hidden int // records on older pages
	// Conv is the conversation view: the context as the model sees it,
	// its latest entries; ConvHidden entries before them are left out.
	Conv       []convItem
	ConvHidden int
	Dropped    []droppedItem
	// DroppedMore are the dropped entries past droppedItems, not listed.
	DroppedMore int
	Newer       string
	Older       string
}

// pageView makes page of v (page 0 the latest records, page 1 the n
// before, and so on); page is in range. Of an unexplained view, it reads
// the records the page shows, as far as ReadBytes goes.
func (h *Handler) pageView(ctx context.Context, v *View, base string, page int) (*pageView, error) {
	n := h.opt.PageRecords
	last := (len(v.Rows) - 1) / n
	end := len(v.Rows) - page*n
	shown := v.Rows[max(end-n, 0):end]
	if v.Cut != "" {
		if err := h.fill(ctx, v.Session, shown); err != nil {
			return nil, err
		}
	}
	// The conversation takes an eighth of the page's previews at most,
	// the records the rest.
	budget := h.opt.PageBytes / 8
	conv, convHidden := conversation(v, base, budget)
	used := 0
	for _, it := range conv {
		used += it.bytes()
	}
	pv := &pageView{Base: base, Page: page, Conv: conv, ConvHidden: convHidden, Rows: h.rows(v, shown, base, h.opt.PageBytes-used), Hidden: max(end-n, 0)}
	// A link to a record goes to the page that shows it.
	href := func(seq uint64) string {
		i, _ := slices.BinarySearchFunc(v.Rows, seq, func(r Row, seq uint64) int { return cmp.Compare(r.Seq, seq) })
		if p := (len(v.Rows) - 1 - i) / n; p != page {
			return fmt.Sprintf("%s#seq-%d", sessionURL(base, v.At, p), seq)
		}
		return fmt.Sprintf("#seq-%d", seq)
	}
	for _, c := range v.Dropped.UnpairedCalls {
		if len(pv.Dropped) == droppedItems {
			pv.DroppedMore++
			continue
		}
		pv.Dropped = append(pv.Dropped, droppedItem{What: "unpaired call", ID: cut(c.ID, convName), Tool: cut(c.Tool, convName), Seq: c.Seq, Href: href(c.Seq)})
	}
	for _, o := range v.Dropped.OrphanResults {
		if len(pv.Dropped) == droppedItems {
			pv.DroppedMore++
			continue
		}
		pv.Dropped = append(pv.Dropped, droppedItem{What: "orphan result", ID: cut(o.ID, convName), Seq: o.Seq, Href: href(o.Seq)})
	}
	if page < last {
		pv.Older = sessionURL(base, v.At, page+1)
	}
	if page > 0 {
		pv.Newer = sessionURL(base, v.At, page-1)
	}
	bare := *v
	bare.Messages = nil
	bare.Rows = make([]Row, len(v.Rows))
	for i, row := range v.Rows {
		row.Value = nil
		bare.Rows[i] = row
	}
	pv.View = &bare
	return pv, nil
}

func (h *Handler) renderPage(w http.ResponseWriter, r *http.Request, pv *pageView) {
	h.render(w, r, "session", map[string]any{
		"Title": "session " + pv.View.Session, "ID": pv.View.Session, "View": pv.View, "Rows": pv.Rows, "Dropped": pv.Dropped, "DroppedMore": pv.DroppedMore,
		"Hidden": pv.Hidden, "Conv": pv.Conv, "ConvHidden": pv.ConvHidden, "Live": pv.View.At == 0 && pv.Page == 0, "Base": pv.Base, "Page": pv.Page,
		"Older": pv.Older, "Newer": pv.Newer,
		"Statuses": []projection.Status{projection.StatusKept, projection.StatusConverted, projection.StatusPruned, projection.StatusTrimmed,
			projection.StatusCheckpoint, projection.StatusReplaced, projection.StatusDropped, StatusRejected, StatusQuarantined},
	})
}

// rows makes the rows of a page, their previews bounded by PageBytes.
func (h *Handler) rows(v *View, shown []Row, base string, budget int) []recordRow {
	inContext := imagesIn(v.Messages)
	rows := make([]recordRow, len(shown))
	for i, row := range shown {
		rr := recordRow{Row: row, Base: base, Divider: row.Class == "compaction"}
		rr.Rule = cut(rr.Rule, ruleBytes)
		switch {
		case row.Value == nil && row.Status == StatusUnexplained:
			rr.Preview, rr.Cut = fmt.Sprintf("(a record of %s, not read for this page: open the raw record)", mib(row.Size)), true
		case row.Value == nil:
			rr.Preview = "(not decoded: open the raw record)"
		case budget <= 0:
			rr.Preview, rr.Cut = "(left out: the page holds enough; open the raw record)", true
		default:
			rr.Preview = preview(row.Value, min(previewTotal, budget))
			rr.Cut = strings.HasSuffix(rr.Preview, "…") || strings.Contains(rr.Preview, "…[")
			budget -= len(rr.Preview)
			if v.Cut != "" {
				break // no context to tell a kept image from an omitted one
			}
			n := 0
			walkImages(row.Value, func(blk *record.Map, _ inline) {
				if n < rowImages {
					rr.Images = append(rr.Images, imageRef{N: n, InContext: inContext[blk]})
				} else {
					rr.MoreImages++
				}
				n++
			})
		}
		for k := range row.Messages {
			if k == contextPerRow || budget <= 0 {
				rr.More = row.Messages - k
				break
			}
			m := v.Messages[row.First+k]
			role := ""
			if mm, ok := m.(*record.Map); ok {
				role, _ = mm.String("role")
			}
			p := preview(m, min(previewTotal/2, budget))
			budget -= len(p)
			rr.Context = append(rr.Context, contextMsg{Index: row.First + k, Role: role, Preview: p})
		}
		rows[i] = rr
	}
	return rows
}
