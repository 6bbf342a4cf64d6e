package ops

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9090": true,
		"localhost:9090": true,
		"[::1]:9090":     true,
		"127.0.0.2:1":    true,
		":9090":          false,
		"0.0.0.0:9090":   false,
		"[::]:9090":      false,
		"10.0.0.5:9090":  false,
		"example.com:80": false,
	} {
		require.Equal(t, want, Loopback(addr), addr)
	}
}

func TestServer_RefusesExposedWithoutToken(t *testing.T) {
	s := New("0.0.0.0:0")
	require.ErrorIs(t, s.Open(), ErrExposed)
	s.Token = "t"
	require.NoError(t, s.Open())
	require.NoError(t, s.Close())
}

func TestServer_Readyz(t *testing.T) {
	s := New("127.0.0.1:0")
	var why atomic.Pointer[error]
	s.Ready = func(context.Context) error {
		if p := why.Load(); p != nil {
			return *p
		}
		return nil
	}
	require.NoError(t, s.Open())
	defer s.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + s.ListenAddr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	err := errors.New("catching up")
	why.Store(&err)
	code, body = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: catching up\n", body)
	code, _ = get("/healthz")
	require.Equal(t, http.StatusOK, code)
	code, _ = get("/metrics")
	require.Equal(t, http.StatusNotFound, code, "no registry, no metrics")
}

// request sends a request to the server with the given headers (pairs)
// and returns the response, its body read.
func request(t *testing.T, s *Server, method, path string, body io.Reader, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.ListenAddr()+path, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func mounted(s *Server) {
	s.Mount("/ui/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "inspector") }))
}

// TestServer_Hosts: a name the listener does not serve (a DNS rebinding,
// for one) is answered 421, whatever the path but the probes; the names
// it serves and IP literals pass.
func TestServer_Hosts(t *testing.T) {
	s := New("127.0.0.1:0")
	s.Hosts = []string{"ctxd.example.com"}
	mounted(s)
	require.NoError(t, s.Open())
	defer s.Close()
	_, port, _ := net.SplitHostPort(s.ListenAddr())
	for _, host := range []string{"attacker.example:" + port, "attacker.example", "localhost.attacker.example:" + port, "127.0.0.1.nip.io:" + port, "10.1.2.3:" + port} {
		for _, p := range []string{"/ui/sessions/demo", "/ui/", "/metrics", "/login"} {
			resp, body := request(t, s, "GET", p, nil, "Host", host)
			require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, "%s %s", host, p)
			require.Contains(t, body, "--http-hosts", "the error names the flag")
			require.NotContains(t, body, "inspector")
		}
		resp, _ := request(t, s, "GET", "/healthz", nil, "Host", host)
		require.Equal(t, http.StatusOK, resp.StatusCode, "the probes answer any name")
	}
	for _, host := range []string{"localhost:" + port, "LOCALHOST", "127.0.0.1:" + port, "[::1]:" + port, "ctxd.example.com:" + port, "ctxd.example.com."} {
		resp, body := request(t, s, "GET", "/ui/x", nil, "Host", host)
		require.Equal(t, http.StatusOK, resp.StatusCode, host)
		require.Equal(t, "inspector", body)
	}
}

// TestServer_HostsWildcard: on every interface, any IP literal is an
// address the listener serves; names still need Hosts.
func TestServer_HostsWildcard(t *testing.T) {
	s := New("0.0.0.0:0")
	s.Token = "s3cret"
	mounted(s)
	require.NoError(t, s.Open())
	defer s.Close()
	resp, _ := request(t, s, "GET", "/ui/x", nil, "Host", "10.1.2.3:9090", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = request(t, s, "GET", "/ui/x", nil, "Host", "attacker.example:9090")
	require.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
	// A scraper that knows the token may use any name.
	resp, _ = request(t, s, "GET", "/ui/x", nil, "Host", "ctxd.monitoring.svc:9090", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestServer_Login: with a token, a browser exchanges it once for an
// HttpOnly SameSite=Strict cookie that opens the mounted pages (not
// /metrics, which keeps the bearer token); a logout ends it.
func TestServer_Login(t *testing.T) {
	s := New("127.0.0.1:0")
	s.Token = "s3cret"
	s.Registry = prometheus.NewRegistry()
	mounted(s)
	require.NoError(t, s.Open())
	defer s.Close()
	form := func(token string) io.Reader { return strings.NewReader(url.Values{"token": {token}}.Encode()) }
	ct := "application/x-www-form-urlencoded"
	origin := "http://" + s.ListenAddr()

	// A browser without a session is sent to the login page; a script gets 401.
	resp, _ := request(t, s, "GET", "/ui/sessions/demo?at=3", nil, "Accept", "text/html")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login?next=%2Fui%2Fsessions%2Fdemo%3Fat%3D3", resp.Header.Get("Location"))
	resp, _ = request(t, s, "GET", "/ui/sessions/demo", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	resp, body := request(t, s, "GET", "/login?next=%2Fui%2F", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `<form method="post" action="/login?next=%2Fui%2F">`, "the form keeps where the browser was going")
	require.Contains(t, body, `name="token"`)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")

	// A wrong token, or a post from another origin, gets no cookie.
	resp, body = request(t, s, "POST", "/login", form("wrong"), "Content-Type", ct, "Origin", origin)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Empty(t, resp.Cookies())
	require.Contains(t, body, "wrong token")
	for _, from := range [][]string{{"Origin", "http://attacker.example"}, {"Origin", "null"}, {"Sec-Fetch-Site", "cross-site", "Origin", origin}, {"Sec-Fetch-Site", "same-site"}} {
		resp, _ = request(t, s, "POST", "/login", form("s3cret"), append([]string{"Content-Type", ct}, from...)...)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, from)
		require.Empty(t, resp.Cookies(), from)
	}
	resp, _ = request(t, s, "POST", "/login", strings.NewReader("token="+strings.Repeat("x", 1<<20)), "Content-Type", ct, "Origin", origin)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	// The right one: a cookie, and back to where the browser was going.
	resp, _ = request(t, s, "POST", "/login?next=%2Fui%2Fsessions%2Fdemo", form("s3cret"), "Content-Type", ct, "Origin", origin)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/ui/sessions/demo", resp.Header.Get("Location"))
	require.Len(t, resp.Cookies(), 1)
	c := resp.Cookies()[0]
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, "/", c.Path)
	require.NotContains(t, c.Value, "s3cret")
	require.GreaterOrEqual(t, len(c.Value), 32)
	require.False(t, c.Secure, "plain HTTP: a Secure cookie would never come back")
	cookie := c.Name + "=" + c.Value

	// Behind a proxy that terminates TLS, the cookie is Secure.
	resp, _ = request(t, s, "POST", "/login", form("s3cret"), "Content-Type", ct, "Origin", origin, "X-Forwarded-Proto", "https")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	require.True(t, resp.Cookies()[0].Secure, "over the proxy's TLS")

	resp, body = request(t, s, "GET", "/ui/x", nil, "Cookie", cookie)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "inspector", body)
	resp, _ = request(t, s, "GET", "/metrics", nil, "Cookie", cookie)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "/metrics keeps the bearer token")
	resp, _ = request(t, s, "GET", "/ui/x", nil, "Cookie", c.Name+"=forged"+c.Value[6:])
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// Only where the browser was going on this listener.
	for _, next := range []string{"//attacker.example/", "https://attacker.example/", "/\\attacker.example", "javascript:alert(1)"} {
		resp, _ = request(t, s, "POST", "/login?next="+url.QueryEscape(next), form("s3cret"), "Content-Type", ct, "Origin", origin)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/ui/", resp.Header.Get("Location"), next)
	}

	// Logging out from another origin does nothing; from the page it ends the session.
	resp, _ = request(t, s, "POST", "/logout", nil, "Cookie", cookie, "Origin", "http://attacker.example")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = request(t, s, "POST", "/logout", nil, "Cookie", cookie, "Origin", origin)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = request(t, s, "GET", "/ui/x", nil, "Cookie", cookie)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the session ended on the server")
}

// TestServer_NoLoginWithoutToken: on loopback with no token there is
// nothing to log in to.
func TestServer_NoLoginWithoutToken(t *testing.T) {
	s := New("127.0.0.1:0")
	mounted(s)
	require.NoError(t, s.Open())
	defer s.Close()
	resp, body := request(t, s, "GET", "/ui/x", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "inspector", body)
	resp, _ = request(t, s, "GET", "/login", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// FuzzLocalPath: whatever next a login is given, it sends the browser to
// a path of this listener.
func FuzzLocalPath(f *testing.F) {
	for _, s := range []string{"/ui/", "//evil.example/", "/\\evil.example", "https://evil.example", "javascript:alert(1)", "/ui/sessions/a?at=1#seq-2", "", "/%2F%2Fevil", "/\t/evil"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		p := localPath(next)
		require.True(t, strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//"), "%q -> %q", next, p)
		u, err := url.Parse(p)
		require.NoError(t, err)
		require.Empty(t, u.Scheme, "%q -> %q", next, p)
		require.Empty(t, u.Host, "%q -> %q", next, p)
		require.NotContains(t, p, "\\")
	})
}

// FuzzHostServed: on loopback, no name but localhost and the listed ones
// is served, whatever the Host header holds.
func FuzzHostServed(f *testing.F) {
	for _, s := range []string{"localhost:1", "127.0.0.1", "[::1]:9", "attacker.example", "LOCALHOST.", "localhost.attacker", "", ":", "[", "ctxd.example.com:1"} {
		f.Add(s)
	}
	s := &Server{Addr: "127.0.0.1:9090", Hosts: []string{"ctxd.example.com"}}
	f.Fuzz(func(t *testing.T, host string) {
		if !s.hostServed(host) {
			return
		}
		h, _, err := net.SplitHostPort(host)
		if err != nil {
			h = host
		}
		h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
		ip := net.ParseIP(h)
		require.True(t, h == "localhost" || h == "ctxd.example.com" || (ip != nil && ip.IsLoopback()), "%q served", host)
	})
}
