// Package ops is ctxd's HTTP listener for operators: Prometheus metrics
// at /metrics, liveness at /healthz, readiness at /readyz, and whatever
// else is mounted on it (an inspector UI, for one).
//
// The listener is off unless an address is given. /healthz and /readyz
// answer anyone: they say only "ok" or why not. Every other path,
// /metrics and mounted handlers included, requires the bearer token when
// one is set; binding beyond loopback without a token is refused, so what
// the listener exposes is always a choice. A browser, which sends no
// bearer token, logs in at /login: the token, posted once, is exchanged
// for an HttpOnly, SameSite=Strict session cookie that opens the mounted
// handlers (not /metrics); /logout ends it.
//
// Every path but the probes answers only the host names the listener
// serves (localhost, the loopback addresses, the address it listens on,
// Hosts), so that a web page that rebinds its own name to this address
// reads nothing; a request with the bearer token may use any name.
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrExposed is returned by Open for an address beyond loopback without a
// token.
var ErrExposed = errors.New("ops: listening beyond loopback needs a token")

// Server is the operators' HTTP listener.
type Server struct {
	// Addr is host:port to listen on; port 0 picks a free one.
	Addr string
	// Token, when set, must come as "Authorization: Bearer TOKEN" on every
	// path but /healthz and /readyz.
	Token string
	// Hosts are names the listener serves besides localhost, the
	// loopback addresses and the address it listens on (any IP address
	// when that is every interface): a request for another name is
	// answered 421 unless it carries the bearer token.
	Hosts []string
	// Registry is served at /metrics; nil serves none.
	Registry *prometheus.Registry
	// Ready reports why the service is not ready, nil when it is: /readyz
	// answers 503 with the reason, or 200. nil is always ready.
	Ready func(ctx context.Context) error
	// Logger receives errors; nil discards them.
	Logger *slog.Logger

	logins logins

	mu     sync.Mutex
	mounts map[string]http.Handler
	ln     net.Listener
	srv    *http.Server
	done   chan struct{}
}

// New returns a server for addr with nothing mounted.
func New(addr string) *Server {
	return &Server{Addr: addr, mounts: map[string]http.Handler{}}
}

// Mount serves h under pattern (an http.ServeMux pattern such as
// "/ui/"), behind the token like /metrics, or a login's cookie. Mount
// before Open.
func (s *Server) Mount(pattern string, h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mounts == nil {
		s.mounts = map[string]http.Handler{}
	}
	s.mounts[pattern] = h
}

// Open listens and serves in the background. It fails at once when the
// address is in use, or is beyond loopback without a token.
func (s *Server) Open() error {
	if s.Token == "" && !Loopback(s.Addr) {
		return fmt.Errorf("%w: %s (set a token, or listen on 127.0.0.1)", ErrExposed, s.Addr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	if s.Registry != nil {
		mux.Handle("/metrics", s.guard(promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{Registry: s.Registry})))
	}
	s.mu.Lock()
	for p, h := range s.mounts {
		mux.Handle(p, s.guardMount(h))
	}
	s.mu.Unlock()
	if s.Token != "" {
		mux.HandleFunc("GET "+LoginPath, func(w http.ResponseWriter, r *http.Request) { s.loginForm(w, r, http.StatusOK, "") })
		mux.HandleFunc("POST "+LoginPath, s.login)
		mux.HandleFunc("POST "+LogoutPath, s.logout)
	}
	// The probes answer any name: kubelets and load balancers use theirs.
	top := http.NewServeMux()
	top.Handle("GET /healthz", mux)
	top.Handle("GET /readyz", mux)
	top.Handle("/", s.checkHost(mux))
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("ops: %w", err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: top, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log("http listener stopped", "err", err)
		}
	}()
	return nil
}

// ListenAddr returns the address the server listens on, host:port.
func (s *Server) ListenAddr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops the server, letting requests in hand finish for 5 seconds.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	s.srv, s.ln = nil, nil
	return err
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := s.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// guard requires the bearer token, when one is set.
func (s *Server) guard(h http.Handler) http.Handler {
	if s.Token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.bearer(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ctxd"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) log(msg string, args ...any) {
	if s.Logger != nil {
		s.Logger.Warn(msg, args...)
	}
}

// Loopback reports whether host:port names only the loopback interface:
// localhost or a loopback IP. An empty host (every interface) is not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
