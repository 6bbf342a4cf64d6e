package inspect

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

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

// loadView loads a session's view as of at in a slot of the views
// reading sessions, as every page but the latest is loaded. It answers
// the request itself when it cannot (503 when no slot is free, or the
// load failed); else the caller calls release once done with the view.
func (h *Handler) loadView(w http.ResponseWriter, r *http.Request, id string, at uint64) (v *View, release func(), ok bool) {
	release, ok = h.load(w, r)
	if !ok {
		return nil, nil, false
	}
	v, err := h.view(r.Context(), id, at)
	if err != nil {
		h.loadFailed(w, r, err)
		release()
		return nil, nil, false
	}
	return v, release, true
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
