package inspect

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Source is what the handler reads: the sessions of the one stream this
// ctxd serves, and its service's live state. Package app provides one.
type Source interface {
	Reader
	// Sizes calls fn for each stored record of the session with a
	// stream sequence from from up to to, in order, with its size in
	// bytes, without reading the record; from 1 to math.MaxUint64 for
	// all.
	Sizes(ctx context.Context, session string, from, to uint64, fn func(seq uint64, size int) error) error
	// Last returns the stream sequence of the session's last stored
	// record, 0 when it has none, without reading the others.
	Last(ctx context.Context, session string) (uint64, error)
	// Sessions lists the sessions with records.
	Sessions(ctx context.Context) ([]SessionRef, error)
	// Summary sizes a session's context as the service holds it now.
	Summary(ctx context.Context, session string) (Summary, error)
	// Record returns the record stored at a stream sequence and its
	// subject.
	Record(ctx context.Context, seq uint64) (subj string, data []byte, err error)
	// Rejected lists the records the projections skipped, oldest first.
	Rejected(ctx context.Context) ([]store.Rejection, error)
	// Applied returns a stream sequence that moves forward as the service
	// applies records: the handler polls it to follow a session.
	Applied() uint64
}

// SessionRef is a session of the stream.
type SessionRef struct {
	ID      string
	Records uint64 // stored records
	LastSeq uint64 // stream sequence of the last
}

// Options adjust the handler. The zero value serves under /ui/ and
// lets every request see every session (see the package doc).
type Options struct {
	// Prefix is the path the handler is mounted at, with a slash at
	// both ends; "" means "/ui/".
	Prefix string
	// Config decides the contexts shown: give the service's.
	Config Config
	// Authorize reports whether a request may see a session; session
	// is "" for a rejected record that belongs to no session. nil lets
	// every request through: then mount the handler only behind the
	// listener's own authentication.
	Authorize func(r *http.Request, session string) bool
	// PageSessions is how many sessions a page of the list shows, each
	// loaded to size its context; 0 means 50.
	PageSessions int
	// PageRecords is how many records a page of a session shows: the
	// latest on the first, earlier ones on the pages after it (?page=N);
	// 0 means 100. The context is built from every record, when the
	// session's records fit in ReadBytes.
	PageRecords int
	// PageBytes bounds the previews of a page, the conversation, records
	// and context messages together (the conversation takes an eighth at
	// most); past it the rows left show no preview, only the link to
	// their raw record. It bounds a diff's previews too. 0 means 1 MiB.
	PageBytes int
	// ReadBytes bounds the bytes of records a view reads (a session
	// page, its JSON or a follow update), whatever the session holds. A
	// session whose records up to the sequence asked for fit in it is
	// read whole and explained: every record's fate, and the context.
	// A larger one is listed by sequence and size from the records'
	// headers, without fates (View.Cut says why), and a page reads only
	// those of its records that fit in ReadBytes, newest first; the
	// others are a link to their raw record. 0 means 8 MiB.
	ReadBytes int
	// ReadRecordBytes is the largest record such a page reads: a preview
	// shows a few KiB of a record, and reading and decoding a screenshot
	// of several MiB for it would take the CPU from the service. A larger
	// record is a link to its raw record. 0 means 1 MiB.
	ReadRecordBytes int
	// MaxRecords bounds the records a view lists: each costs a row in
	// memory (its sequence and size), and a session of millions of small
	// records would hold them all. A session of more is refused with 413,
	// and read whole by ctxd inspect or ctxd context. 0 means 100 000.
	MaxRecords int
	// MaxLoads bounds the views that load a session at once (session
	// pages, their JSON and follow updates, the sessions list). Past it
	// a view is answered 503 at once, with Retry-After. Of those, one at
	// a time reads records. 0 means 2.
	MaxLoads int
	// Logout, when set, is the path a "log out" button posts to.
	Logout string
	// Poll is how often a followed session is checked for new records;
	// 0 means 500ms.
	Poll time.Duration
	// ReadRate bounds the bytes a second that the views read from the
	// stream together: records, raw records and thumbnails, and the
	// records the server loads to send the headers that list their
	// sizes. A read past it waits; the first ReadBytes are read at once.
	// The stream's server and the service share the machine with the
	// views, and a view of a session of screenshots would otherwise load
	// hundreds of MiB as fast as the server can. 0 means
	// DefaultReadRate; below 0, no bound.
	ReadRate int
	// Thumbnails bounds the thumbnails made at once: each decodes a
	// whole record and image, several MiB for a screenshot, so a page of
	// them must not take every core and much memory at once; 0 means 2.
	Thumbnails int
	// Logger receives a line per failed request; nil discards them.
	Logger *slog.Logger
}

//go:embed templates/*.html static/*
var assets embed.FS

// Handler serves the inspector. Close ends the event streams it serves,
// which would otherwise hold an HTTP server's Shutdown.
type Handler struct {
	src  Source
	opt  Options
	mux  *http.ServeMux
	tmpl map[string]*template.Template

	thumbs chan struct{} // a slot per thumbnail being made
	loads  chan struct{} // a slot per view loading a session
	reads  chan struct{} // the one slot of the view reading records

	mu       sync.Mutex
	flights  map[viewKey]*flight // latest pages being loaded
	pages    []cachedPage        // latest pages loaded, oldest first
	lasts    map[string]*lastAt  // by session, for the event streams
	listings []listing           // sessions' records listed, oldest first
	sums     map[string]Summary  // by session, for the sessions list
	closed   chan struct{}
	once     sync.Once
}

// New returns the inspector's handler over src.
func New(src Source, opt Options) *Handler {
	if opt.Prefix == "" {
		opt.Prefix = "/ui/"
	}
	if opt.Config.Options.BrowserTools == nil && opt.Config.Limits == (store.Limits{}) {
		opt.Config = DefaultConfig()
	}
	if opt.PageSessions <= 0 {
		opt.PageSessions = 50
	}
	if opt.PageRecords <= 0 {
		opt.PageRecords = 100
	}
	if opt.PageBytes <= 0 {
		opt.PageBytes = 1 << 20
	}
	if opt.ReadBytes <= 0 {
		opt.ReadBytes = 8 << 20
	}
	if opt.ReadRecordBytes <= 0 {
		opt.ReadRecordBytes = 1 << 20
	}
	if opt.MaxRecords <= 0 {
		opt.MaxRecords = 100_000
	}
	if opt.MaxLoads <= 0 {
		opt.MaxLoads = 2
	}
	if opt.Poll <= 0 {
		opt.Poll = 500 * time.Millisecond
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Thumbnails <= 0 {
		opt.Thumbnails = 2
	}
	if opt.ReadRate == 0 {
		opt.ReadRate = DefaultReadRate
	}
	if opt.ReadRate > 0 {
		src = paced{Source: src, p: newPacer(opt.ReadRate, opt.ReadBytes)}
	}
	h := &Handler{src: src, opt: opt, mux: http.NewServeMux(), closed: make(chan struct{}), thumbs: make(chan struct{}, opt.Thumbnails), loads: make(chan struct{}, opt.MaxLoads), reads: make(chan struct{}, 1), flights: map[viewKey]*flight{}, lasts: map[string]*lastAt{}, sums: map[string]Summary{}}
	h.tmpl = parseTemplates()
	p := opt.Prefix
	h.mux.HandleFunc("GET "+p+"{$}", h.sessions)
	h.mux.HandleFunc("GET "+p+"sessions/{id}", h.session)
	h.mux.HandleFunc("GET "+p+"sessions/{id}/events", h.events)
	h.mux.HandleFunc("GET "+p+"sessions/{id}/records/{seq}", h.rawRecord)
	h.mux.HandleFunc("GET "+p+"sessions/{id}/images/{seq}/{n}", h.thumb)
	h.mux.HandleFunc("GET "+p+"rejected", h.rejected)
	h.mux.HandleFunc("GET "+p+"rejected/{seq}", h.rawRejected)
	static, _ := fs.Sub(assets, "static")
	h.mux.Handle("GET "+p+"static/", http.StripPrefix(p+"static/", http.FileServerFS(static)))
	return h
}

// ServeHTTP serves a request under the prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// No inline script or style runs, whatever a record holds.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	h.mux.ServeHTTP(w, r)
}

// Close ends the event streams in progress and refuses new ones.
func (h *Handler) Close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

func (h *Handler) allowed(r *http.Request, session string) bool {
	return h.opt.Authorize == nil || h.opt.Authorize(r, session)
}

// sessionOf reads and checks the session of a request's path; it answers
// 404 itself for an invalid or unauthorized one, so that a session one
// may not see cannot be told from one that does not exist.
func (h *Handler) sessionOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := subject.CheckSession(id); err != nil {
		h.fail(w, r, http.StatusNotFound, err)
		return "", false
	}
	if !h.allowed(r, id) {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("session %s: %w", id, ErrNoSession))
		return "", false
	}
	return id, true
}

// ErrBusy is the error of a view refused because MaxLoads views are
// reading sessions.
var ErrBusy = errors.New("busy")

// load takes a slot of the views reading sessions, or answers 503.
func (h *Handler) load(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	select {
	case h.loads <- struct{}{}:
		return func() { <-h.loads }, true
	default:
		w.Header().Set("Retry-After", "2")
		h.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("%w: %d views are reading sessions, the most at once; try again shortly", ErrBusy, cap(h.loads)))
		return nil, false
	}
}

// pageOf reads a page number from the query: absent is 0; not a number,
// negative or past last is an error that names it.
func pageOf(r *http.Request, last int) (int, error) {
	s := r.URL.Query().Get("page")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("page: %q is not a page number (0 to %d)", cut(s, 40), last)
	}
	if n > last {
		return 0, fmt.Errorf("page %d: there are pages 0 to %d", n, last)
	}
	return n, nil
}

// seqParam reads a stream sequence from the query; def when absent.
func seqParam(r *http.Request, name string, def uint64) (uint64, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a stream sequence", name, cut(s, 40))
	}
	return n, nil
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	if code >= 500 {
		h.opt.Logger.Warn("inspector request failed", "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	h.render(w, r, "error", map[string]any{"Code": code, "Status": http.StatusText(code), "Err": err.Error()})
}

func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string, data map[string]any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8") // before the status, or it is not sent
	data["Prefix"] = h.opt.Prefix
	data["Logout"] = h.opt.Logout
	if err := h.tmpl[name].ExecuteTemplate(w, "page", data); err != nil {
		h.opt.Logger.Warn("inspector template failed", "page", name, "err", err)
	}
}

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
	release, ok := h.load(w, r)
	if !ok {
		return
	}
	defer release()
	v, err := h.view(r.Context(), id, at)
	if err != nil {
		h.loadFailed(w, r, err)
		return
	}
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

// view loads a session as of at (0: all its records): it lists the
// records' sizes, then reads them all and explains them when they fit in
// ReadBytes; else it returns the list, unexplained, for pageView to read
// what a page shows.
func (h *Handler) view(ctx context.Context, id string, at uint64) (*View, error) {
	if err := subject.CheckSession(id); err != nil {
		return nil, err
	}
	to := at
	if to == 0 {
		to = math.MaxUint64
	}
	// The records listed before are not listed again: a session's stored
	// records only grow, and a view of it as it is now lists only those
	// stored since.
	known, from := h.listed(id, to)
	rows := make([]Row, len(known), len(known)+1)
	total := 0
	for i, k := range known {
		rows[i].Seq, rows[i].Size = k.seq, k.size
		total += k.size
	}
	if len(rows) > h.opt.MaxRecords {
		return nil, h.tooLong(id)
	}
	if from <= to {
		err := h.src.Sizes(ctx, id, from, to, func(seq uint64, size int) error {
			if len(rows) == h.opt.MaxRecords {
				return h.tooLong(id)
			}
			row := Row{Size: size}
			row.Seq = seq
			rows = append(rows, row)
			total += size
			return nil
		})
		if err != nil {
			// Those listed are every record up to the last of them: the
			// next view lists on from there, however long the session
			// takes to list.
			if len(rows) > len(known) {
				h.keepListed(id, rows)
			}
			return nil, fmt.Errorf("read session %s: %w", id, err)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("session %s: %w", id, ErrNoSession)
	}
	if to == math.MaxUint64 || len(rows) > len(known) {
		h.keepListed(id, rows)
	}
	last := rows[len(rows)-1].Seq
	if total <= h.opt.ReadBytes {
		release, err := h.reading(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		// Up to the last record listed: one stored since would take the
		// read past what was weighed.
		return Load(ctx, &bounded{r: h.src, to: last, left: h.opt.ReadBytes}, id, at, h.opt.Config)
	}
	v := &View{Session: id, At: at, Seq: last, Rows: rows}
	v.Cut = fmt.Sprintf("The session's %d records up to seq %d hold %s, more than the %s a view reads: "+
		"they are listed without their fates, and a page shows those of its records that fit in %s, newest first, of at most %s each. "+
		"Every fate: ctxd inspect %s; the context: ctxd context %s.",
		len(rows), last, mib(total), mib(h.opt.ReadBytes), mib(h.opt.ReadBytes), mib(h.opt.ReadRecordBytes), id, id)
	for i := range v.Rows {
		v.Rows[i].Status = StatusUnexplained
		v.Rows[i].Rule = "not explained: the session holds more than a view reads"
	}
	return v, nil
}

func (h *Handler) tooLong(id string) error {
	return fmt.Errorf("%w: session %s has more than the %d records a view lists; read it whole with ctxd inspect %s, or its context with ctxd context %s",
		ErrTooLong, id, h.opt.MaxRecords, id, id)
}

// sized is a record listed by sequence and size.
type sized struct {
	seq  uint64
	size int
}

// listing is a session's records as listed last: every one up to the
// last's sequence.
type listing struct {
	session string
	rows    []sized
}

// listedSessions bounds the listings held, MaxRecords rows of 16 bytes at
// most each.
const listedSessions = 16

// listed returns the records of the session listed before, up to to, and
// the sequence to list from for the rest.
func (h *Handler) listed(id string, to uint64) ([]sized, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.listings {
		if l.session != id {
			continue
		}
		n, _ := slices.BinarySearchFunc(l.rows, to, func(r sized, to uint64) int {
			if r.seq <= to {
				return -1
			}
			return 1
		})
		from := l.rows[len(l.rows)-1].seq + 1
		if n < len(l.rows) {
			from = to + 1 // the records up to to are all listed
		}
		return l.rows[:n:n], from
	}
	return nil, 1
}

// keepListed holds the records a view listed, for the next view of the
// session to list only those after them.
func (h *Handler) keepListed(id string, rows []Row) {
	out := make([]sized, len(rows))
	for i, r := range rows {
		out[i] = sized{seq: r.Seq, size: r.Size}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, l := range h.listings {
		if l.session == id {
			if l.rows[len(l.rows)-1].seq > out[len(out)-1].seq {
				return // a longer one was kept meanwhile
			}
			h.listings = slices.Delete(h.listings, i, i+1)
			break
		}
	}
	if len(h.listings) == listedSessions {
		h.listings = h.listings[1:]
	}
	h.listings = append(h.listings, listing{session: id, rows: out})
}

// forgetListed drops a session's listing: a read of it failed, and a
// record listed may be gone (purged); the next view lists it afresh.
func (h *Handler) forgetListed(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listings = slices.DeleteFunc(h.listings, func(l listing) bool { return l.session == id })
}

// reading waits for the one slot of the view reading records, so that
// views read one after the other rather than take every core from the
// service together.
func (h *Handler) reading(ctx context.Context) (release func(), err error) {
	select {
	case h.reads <- struct{}{}:
		return func() { <-h.reads }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ErrReadBound is the error of a view whose read of a session's records
// went past Options.ReadBytes.
var ErrReadBound = errors.New("past the bytes a view reads")

// bounded reads a session's records up to a sequence, and fails once
// they hold more than left bytes.
type bounded struct {
	r    Reader
	to   uint64
	left int
}

func (b *bounded) Records(ctx context.Context, session string, to uint64, fn func(seq uint64, data []byte) error) error {
	return b.r.Records(ctx, session, min(to, b.to), func(seq uint64, data []byte) error {
		if b.left -= len(data); b.left < 0 {
			return fmt.Errorf("record at seq %d: %w", seq, ErrReadBound)
		}
		return fn(seq, data)
	})
}

// mib is a size for people.
func mib(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// fill reads and decodes the records of shown, rows of an unexplained
// view, newest first, as long as they fit in ReadBytes, each of at most
// ReadRecordBytes; the others keep no value, and the page links to their
// raw record.
func (h *Handler) fill(ctx context.Context, session string, shown []Row) error {
	release, err := h.reading(ctx)
	if err != nil {
		return err
	}
	defer release()
	dec := h.opt.Config.Limits.Decoder()
	left := h.opt.ReadBytes
	for i := len(shown) - 1; i >= 0; i-- {
		row := &shown[i]
		if row.Size > left || row.Size > h.opt.ReadRecordBytes {
			continue
		}
		subj, data, err := h.src.Record(ctx, row.Seq)
		if err != nil {
			h.forgetListed(session)
			return fmt.Errorf("read session %s: %w", session, err)
		}
		if sid, _, err := subject.SessionOfStored(subj); err != nil || sid != session {
			h.forgetListed(session)
			return fmt.Errorf("session %s: seq %d is a record of %s", session, row.Seq, subj)
		}
		left -= len(data)
		v, err := dec.Decode(data)
		if err != nil {
			row.Class, row.Status, row.Rule = "undecodable", StatusRejected, err.Error()
			continue
		}
		row.Value, row.Class = v, projection.Class(v)
	}
	return nil
}

func (h *Handler) loadFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrBusy) {
		w.Header().Set("Retry-After", "2")
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	if errors.Is(err, ErrNoSession) {
		h.fail(w, r, http.StatusNotFound, err)
		return
	}
	if errors.Is(err, ErrTooLong) {
		h.fail(w, r, http.StatusRequestEntityTooLarge, err)
		return
	}
	h.fail(w, r, http.StatusBadGateway, err)
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

// viewKey names a latest page: a session as of at (0: all its records),
// with the records the service had applied when it was loaded.
type viewKey struct {
	session     string
	at, applied uint64
}

// flight is a load of a latest page in progress, which every request
// for it waits for rather than loading it too.
type flight struct {
	done chan struct{}
	pv   *pageView
	err  error
}

// cachedPages bounds the latest pages held, a page's previews (at most
// PageBytes) and a few hundred bytes a record each.
const cachedPages = 16

// latest returns the latest page of a session as of at: the one held
// while the service applied no record since it was loaded, else the one
// being loaded, else one it loads in a slot of MaxLoads (503 when none
// is free). It answers the request itself when it fails.
func (h *Handler) latest(w http.ResponseWriter, r *http.Request, id string, at uint64, base string) (*pageView, bool) {
	key := viewKey{session: id, at: at, applied: h.src.Applied()}
	h.mu.Lock()
	for _, e := range h.pages {
		if e.key == key {
			h.mu.Unlock()
			return e.pv, true
		}
	}
	f, joined := h.flights[key]
	if !joined {
		f = &flight{done: make(chan struct{})}
		h.flights[key] = f
	}
	h.mu.Unlock()
	if joined {
		select {
		case <-f.done:
		case <-r.Context().Done():
			return nil, false
		}
		if f.err != nil {
			h.loadFailed(w, r, f.err)
			return nil, false
		}
		return f.pv, true
	}
	release, ok := h.load(w, r)
	if ok {
		// Others may wait for this load: it goes on if this request
		// ends, until the handler closes.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
		go func() {
			select {
			case <-h.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
		var v *View
		v, f.err = h.view(ctx, id, at)
		if f.err == nil {
			f.pv, f.err = h.pageView(ctx, v, base, 0)
		}
		cancel()
		release()
	} else {
		f.err = fmt.Errorf("%w: %d views are reading sessions, the most at once; try again shortly", ErrBusy, cap(h.loads))
	}
	h.mu.Lock()
	delete(h.flights, key)
	if f.err == nil {
		// The latest of its session and at replaces the one before.
		h.pages = slices.DeleteFunc(h.pages, func(e cachedPage) bool { return e.key.session == id && e.key.at == at })
		if len(h.pages) == cachedPages {
			h.pages = h.pages[1:]
		}
		h.pages = append(h.pages, cachedPage{key: key, pv: f.pv})
	}
	h.mu.Unlock()
	close(f.done)
	if !ok {
		return nil, false // answered 503
	}
	if f.err != nil {
		h.loadFailed(w, r, f.err)
		return nil, false
	}
	return f.pv, true
}

// cachedPage is a latest page held for the requests after the one that
// loaded it.
type cachedPage struct {
	key viewKey
	pv  *pageView
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

// events streams a session's progress as server-sent events: an event
// "seq" with the stream sequence of the session's last record, at once
// and whenever it moves. It reads no record: the last is found from the
// headers of the session's last message, then of those after it.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	id, ok := h.sessionOf(w, r)
	if !ok {
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		h.fail(w, r, http.StatusInternalServerError, errors.New("streaming is not supported by this server"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	flusher.Flush()
	tick := time.NewTicker(h.opt.Poll)
	defer tick.Stop()
	var applied, sent uint64
	first := true
	idle := 0
	for {
		if a := h.src.Applied(); first || a != applied {
			applied = a
			seq, err := h.last(r.Context(), id, a)
			if err == nil && seq != 0 && (first || seq != sent) {
				sent = seq
				fmt.Fprintf(w, "event: seq\ndata: %d\n\n", seq)
				flusher.Flush()
				idle = 0
			}
			first = false
		}
		if idle++; idle*int(h.opt.Poll/time.Millisecond) >= 15000 {
			fmt.Fprint(w, ": keep-alive\n\n") // proxies close silent streams
			flusher.Flush()
			idle = 0
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-h.closed:
			return
		}
	}
}

// lastAt is a session's last record as found once the service had
// applied up to applied, shared by the event streams following it.
type lastAt struct {
	applied uint64
	done    chan struct{}
	seq     uint64
	err     error
}

// last returns the stream sequence of the session's last record once
// the service applied up to applied: found once for every page following
// the session, from the headers of the records after the last found
// before, so that following a session reads only what is new.
func (h *Handler) last(ctx context.Context, id string, applied uint64) (uint64, error) {
	h.mu.Lock()
	f := h.lasts[id]
	if f == nil || f.applied != applied {
		var prev *lastAt
		if f != nil {
			select {
			case <-f.done:
				if f.err == nil {
					prev = f
				}
			default:
			}
		}
		if len(h.lasts) >= 1024 {
			clear(h.lasts) // sessions no longer followed
		}
		f = &lastAt{applied: applied, done: make(chan struct{})}
		h.lasts[id] = f
		h.mu.Unlock()
		// Others wait for it: it goes on if this stream ends.
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if prev != nil && prev.seq != 0 {
			f.seq = prev.seq
			f.err = h.src.Sizes(c, id, prev.seq+1, math.MaxUint64, func(seq uint64, _ int) error {
				f.seq = seq
				return nil
			})
		} else {
			f.seq, f.err = h.src.Last(c, id)
		}
		cancel()
		close(f.done)
		return f.seq, f.err
	}
	h.mu.Unlock()
	select {
	case <-f.done:
		return f.seq, f.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// seqOf reads the {seq} of a path.
func seqOf(r *http.Request) (uint64, error) {
	s := r.PathValue("seq")
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a stream sequence", cut(s, 40))
	}
	return n, nil
}

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

func parseTemplates() map[string]*template.Template {
	funcs := template.FuncMap{
		"path": url.PathEscape,
		"kib": func(n int) string {
			if n < 10*1024 {
				return strconv.Itoa(n) + " B"
			}
			return fmt.Sprintf("%.1f KiB", float64(n)/1024)
		},
		"add": func(a, b int) int { return a + b },
	}
	out := map[string]*template.Template{}
	for _, name := range []string{"sessions", "session", "rejected", "error", "diff"} {
		out[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html"))
	}
	out["follow"] = out["session"]
	return out
}
