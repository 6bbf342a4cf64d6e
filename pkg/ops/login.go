package ops

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CookieName is the name of the cookie a login sets.
const CookieName = "ctxd_session"

// Paths of the login a browser uses when the listener has a token.
const (
	LoginPath  = "/login"
	LogoutPath = "/logout"
)

// Bounds of the logins held: a session lives LoginTTL, and past
// maxLogins the one closest to its end goes first, so that a flood of
// logins costs a bounded amount of memory.
const (
	LoginTTL  = 12 * time.Hour
	maxLogins = 1024
)

// logins are the browser sessions of a listener: random values, known
// only to the server and the browser that logged in.
type logins struct {
	mu  sync.Mutex
	end map[string]time.Time // by the SHA-256 of the cookie value
}

func (l *logins) start(now time.Time) string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	v := base64.RawURLEncoding.EncodeToString(b[:])
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.end == nil {
		l.end = map[string]time.Time{}
	}
	for k, end := range l.end {
		if now.After(end) {
			delete(l.end, k)
		}
	}
	if len(l.end) >= maxLogins {
		var first string
		for k, end := range l.end {
			if first == "" || end.Before(l.end[first]) {
				first = k
			}
		}
		delete(l.end, first)
	}
	l.end[key(v)] = now.Add(LoginTTL)
	return v
}

func (l *logins) valid(v string, now time.Time) bool {
	if v == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	end, ok := l.end[key(v)]
	return ok && now.Before(end)
}

func (l *logins) stop(v string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.end, key(v))
}

func key(v string) string {
	h := sha256.Sum256([]byte(v))
	return string(h[:])
}

// bearer reports whether the request carries the token as a bearer
// token. The comparison takes the same time whatever the header holds.
func (s *Server) bearer(r *http.Request) bool {
	if s.Token == "" {
		return false
	}
	got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
	want := sha256.Sum256([]byte("Bearer " + s.Token))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// loggedIn reports whether the request carries a live login's cookie.
func (s *Server) loggedIn(r *http.Request) bool {
	c, err := r.Cookie(CookieName)
	return err == nil && s.logins.valid(c.Value, time.Now())
}

// guardMount requires, when a token is set, the bearer token or a
// login's cookie; a browser without either is sent to the login page.
func (s *Server) guardMount(h http.Handler) http.Handler {
	if s.Token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.bearer(r) || s.loggedIn(r) {
			h.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, LoginPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="ctxd"`)
		http.Error(w, "unauthorized: send the token as a bearer token, or log in at "+LoginPath, http.StatusUnauthorized)
	})
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>ctxd · log in</title></head>
<body>
<h1>ctxd</h1>
{{if .Err}}<p role="alert">{{.Err}}</p>{{end}}
<form method="post" action="{{.Action}}">
<label>token <input type="password" name="token" autocomplete="current-password" autofocus required></label>
<button type="submit">log in</button>
</form>
<p>The token is the one ctxd serve was given (--http-token, CTXD_HTTP_TOKEN). It is sent once; the browser then holds a session cookie for 12 hours, or until you log out.</p>
</body>
</html>`))

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request, code int, why string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
	action := LoginPath
	if next := r.URL.Query().Get("next"); next != "" {
		action += "?next=" + url.QueryEscape(next)
	}
	w.WriteHeader(code)
	loginPage.Execute(w, map[string]string{"Action": action, "Err": why})
}

// login exchanges the token, posted once from the login form, for a
// session cookie: HttpOnly, SameSite=Strict, Secure over TLS (overTLS).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "forbidden: a login is posted from this listener's own page", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		if _, big := errors.AsType[*http.MaxBytesError](err); big {
			http.Error(w, "login form too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "bad login form: "+err.Error(), http.StatusBadRequest)
		return
	}
	got := sha256.Sum256([]byte(r.PostForm.Get("token")))
	want := sha256.Sum256([]byte(s.Token))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		s.loginForm(w, r, http.StatusUnauthorized, "wrong token")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: s.logins.start(time.Now()), Path: "/",
		MaxAge: int(LoginTTL / time.Second), HttpOnly: true, Secure: overTLS(r), SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, localPath(r.URL.Query().Get("next")), http.StatusSeeOther)
}

// overTLS reports whether the browser reached the listener over TLS: the
// listener's own (none: it speaks plain HTTP), or that of a proxy in
// front of it, which says so in X-Forwarded-Proto. A client that claims
// it falsely gets a cookie its browser sends back over TLS only: its
// own login fails, nobody else's.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
}

// logout ends the request's login, on the server and in the browser.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "forbidden: a logout is posted from this listener's own page", http.StatusForbidden)
		return
	}
	if c, err := r.Cookie(CookieName); err == nil {
		s.logins.stop(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: overTLS(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, LoginPath, http.StatusSeeOther)
}

// sameOrigin reports whether a POST comes from a page of this listener.
// Browsers say where a request comes from in Sec-Fetch-Site; those that
// do not send Origin, a page of another site its own (or "null", which
// pages with no-referrer, as these, send too, hence Sec-Fetch-Site
// first). A request with neither is no browser's: a script, which needs
// the token anyway.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
}

// localPath returns next when it is a path of this listener, else the
// inspector's: a login never sends the browser to another site.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return "/ui/"
	}
	return next
}

// hostServed reports whether a request's Host names this listener:
// localhost, a loopback address, the address it listens on, any IP
// address when it listens on every interface, or one of Hosts. A page
// that rebinds its own name to this address names itself, and is not.
func (s *Server) hostServed(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		return true
	}
	bound, _, err := net.SplitHostPort(s.Addr)
	if err != nil {
		bound = s.Addr
	}
	bound = strings.ToLower(strings.Trim(bound, "[]"))
	if bound == host {
		return true
	}
	if bip := net.ParseIP(bound); ip != nil && (bound == "" || (bip != nil && bip.IsUnspecified())) {
		return true
	}
	for _, h := range s.Hosts {
		if strings.TrimSuffix(strings.ToLower(strings.Trim(strings.TrimSpace(h), "[]")), ".") == host {
			return true
		}
	}
	return false
}

// checkHost answers 421 to a request for a name the listener does not
// serve, unless it carries the bearer token: a DNS rebinding page never
// has it, and scrapers that do may name the listener as they like.
func (s *Server) checkHost(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostServed(r.Host) && !s.bearer(r) {
			http.Error(w, "misdirected request: this listener does not serve the host "+strconv.Quote(r.Host)+" (add it with --http-hosts)", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
