// Package natsd runs an embedded NATS server with JetStream, the
// single-binary default of ctxd and the server of its tests.
//
// The server is hardened for embedding: it installs no signal handlers
// (the process owns its signals), never calls os.Exit, keeps its store in
// an explicit directory, and its fsync policy is an explicit choice.
package natsd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Defaults of a Server.
const (
	DefaultName       = "ctxd-embedded"
	DefaultHost       = "127.0.0.1"
	DefaultPort       = 4222
	DefaultMaxPayload = 8 << 20 // a 5 MiB screenshot in a base64 JSON record fits
	// DefaultSyncInterval is how often JetStream fsyncs its files when
	// SyncAlways is off: NATS's own default.
	DefaultSyncInterval = 2 * time.Minute
)

// Server is an embedded NATS server with JetStream.
type Server struct {
	// Name is the server's name, which the servers of a cluster tell
	// each other apart by.
	Name string
	// Host and Port to listen on for clients; Port -1 picks a free port.
	Host string
	Port int
	// StoreDir holds JetStream's files.
	StoreDir string
	// MaxPayload is the largest message a client may publish.
	MaxPayload int32
	// SyncAlways makes JetStream fsync every write before acknowledging
	// it: an acknowledged record survives a power loss, at a cost in
	// throughput. When false, files are fsynced every SyncInterval and an
	// operating-system crash can lose what was acknowledged since.
	SyncAlways   bool
	SyncInterval time.Duration
	// Logger receives the server's log lines; nil discards them.
	Logger *slog.Logger
	// ConfigFile, when set, is a nats-server configuration file
	// (accounts, users, TLS, ...). What it sets wins; the fields above
	// fill in what it leaves out, and JetStream is always on.
	ConfigFile string
	// Cluster, when its Name is set, joins the server to a cluster: its
	// JetStream then replicates streams and elects leaders with the
	// other servers'.
	Cluster Cluster

	ns       *server.Server
	lock     *os.File // the store directory's lock, held while ns runs
	storeDir string   // where ns stores, as it was opened
}

// Cluster says where a server meets the other servers of its cluster.
type Cluster struct {
	// Name is the cluster's name, the same on every server of it.
	Name string
	// Host and Port to listen on for routes from the other servers.
	Host string
	Port int
	// Routes are the route URLs (nats-route://host:port) of the servers
	// to connect to; a server skips its own, so every server can be
	// given the same list.
	Routes []string
}

// New returns a server with the defaults, storing under storeDir.
func New(storeDir string) *Server {
	return &Server{
		Name:         DefaultName,
		Host:         DefaultHost,
		Port:         DefaultPort,
		StoreDir:     storeDir,
		MaxPayload:   DefaultMaxPayload,
		SyncInterval: DefaultSyncInterval,
	}
}

// ErrStoreInUse is returned by Open when another server holds the store
// directory.
var ErrStoreInUse = errors.New("natsd: the store directory is in use by another server")

// lockFile is the store directory's lock, held while a server runs on it.
const lockFile = "ctxd.lock"

// ErrExposed is returned by Open for a server that would listen beyond
// loopback without authentication.
var ErrExposed = errors.New("natsd: listening beyond loopback without authentication")

// Open starts the server and waits until it accepts connections.
func (s *Server) Open() error { return s.OpenContext(context.Background()) }

// OpenContext starts the server and waits until it accepts connections,
// its listener fails (a port in use, at once), or ctx is done.
func (s *Server) OpenContext(ctx context.Context) error {
	if s.StoreDir == "" {
		return errors.New("natsd: no store directory")
	}
	dir, err := filepath.Abs(s.StoreDir)
	if err != nil {
		return fmt.Errorf("natsd: store directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("natsd: store directory: %w", err)
	}
	opts := &server.Options{}
	if s.ConfigFile != "" {
		if opts, err = server.ProcessConfigFile(s.ConfigFile); err != nil {
			return fmt.Errorf("natsd: %w", err)
		}
	}
	if opts.ServerName == "" {
		opts.ServerName = s.Name
	}
	if opts.Host == "" {
		opts.Host = s.Host
	}
	if opts.Port == 0 {
		opts.Port = s.Port
	}
	if opts.StoreDir == "" {
		opts.StoreDir = dir
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = s.MaxPayload
	}
	if !opts.SyncAlways && opts.SyncInterval == 0 {
		opts.SyncAlways, opts.SyncInterval = s.SyncAlways, s.SyncInterval
	}
	opts.JetStream = true
	opts.NoSigs = true
	opts.NoLog = false // our logger, which also sees a listener's failure
	if !loopback(opts.Host) && !hasAuth(opts) {
		return fmt.Errorf("%w: the embedded server would accept anyone on %s:%d; give --nats-config FILE with users or accounts (see deployments/nats/auth.conf), or listen on 127.0.0.1", ErrExposed, opts.Host, opts.Port)
	}
	// The other listeners a configuration may open serve the same
	// accounts: each is held to the same rule (a host left out is every
	// interface).
	for _, l := range []struct {
		what, host string
		port       int
		own        bool   // credentials of its own, beside the server's
		noAuthUser string // its own no_auth_user
	}{
		{"websocket", opts.Websocket.Host, opts.Websocket.Port, opts.Websocket.Username != "" || opts.Websocket.Token != "", opts.Websocket.NoAuthUser},
		{"leafnodes", opts.LeafNode.Host, opts.LeafNode.Port, opts.LeafNode.Username != "" || opts.LeafNode.Nkey != "" || len(opts.LeafNode.Users) > 0, ""},
		{"mqtt", opts.MQTT.Host, opts.MQTT.Port, opts.MQTT.Username != "" || opts.MQTT.Token != "", opts.MQTT.NoAuthUser},
	} {
		if l.port == 0 || loopback(l.host) || (l.noAuthUser == "" && (l.own || hasAuth(opts))) {
			continue
		}
		host := l.host
		if host == "" {
			host = "every interface"
		}
		return fmt.Errorf("%w: the %s listener on %s port %d would accept anyone; give it, or the server, users or accounts (see deployments/nats/auth.conf), or listen on 127.0.0.1", ErrExposed, l.what, host, l.port)
	}
	if opts.HTTPPort != 0 || opts.HTTPSPort != 0 {
		// NATS's monitoring has no authentication: users or not, it
		// lists every connection, user, subscription and stream.
		host := opts.HTTPHost
		if host == "" {
			host = opts.Host
		}
		if !loopback(host) {
			return fmt.Errorf("%w: monitoring (http_port) on %s answers anyone and lists every user, subscription and stream; set http: 127.0.0.1:PORT", ErrExposed, host)
		}
	}
	if c := s.Cluster; c.Name != "" {
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: c.Host, Port: c.Port}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return fmt.Errorf("natsd: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	if err := os.MkdirAll(opts.StoreDir, 0o755); err != nil {
		return fmt.Errorf("natsd: store directory: %w", err)
	}
	lock, err := lockStore(opts.StoreDir)
	if err != nil {
		return err
	}
	unlock := func() {
		if lock != nil {
			lock.Close()
		}
	}
	logger := s.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	restored, err := restoreKept(opts.StoreDir)
	if err != nil {
		unlock()
		return err
	}
	if len(restored) > 0 {
		logger.Warn("stream configuration put back as it was before an update that was not done (the process died during it)", "streams", restored)
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		unlock()
		return fmt.Errorf("natsd: %w", err)
	}
	la := &logAdapter{l: logger, fatal: make(chan string, 1)}
	ns.SetLoggerV2(la, false, false, false)
	ns.Start()
	stop := func(err error) error {
		ns.Shutdown()
		ns.WaitForShutdown()
		unlock()
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !ns.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-la.fatal:
			return stop(fmt.Errorf("natsd: %s", msg))
		case <-ctx.Done():
			return stop(fmt.Errorf("natsd: %w", ctx.Err()))
		default:
		}
		if time.Now().After(deadline) {
			return stop(fmt.Errorf("natsd: server on %s:%d not ready after 30s", opts.Host, opts.Port))
		}
	}
	s.ns, s.lock, s.storeDir = ns, lock, opts.StoreDir
	return nil
}

// loopback reports whether host is only the loopback interface.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hasAuth reports whether the options require clients to authenticate:
// users or accounts, and no no_auth_user that lets a client without
// credentials in as one of them.
func hasAuth(o *server.Options) bool {
	return o.NoAuthUser == "" && (o.Username != "" || o.Authorization != "" || len(o.Users) > 0 || len(o.Nkeys) > 0 ||
		len(o.TrustedOperators) > 0 || len(o.TrustedKeys) > 0 || o.AuthCallout != nil ||
		(o.TLSVerify && o.TLSMap))
}

// ClientURL returns the URL clients connect to, nats://HOST:PORT.
func (s *Server) ClientURL() string {
	if s.ns == nil {
		return ""
	}
	return s.ns.ClientURL()
}

// Close shuts the server down and waits for it to stop.
func (s *Server) Close() error {
	if s.ns == nil {
		return nil
	}
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.ns = nil
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
	return nil
}

// logAdapter routes nats-server log lines to slog, and the first fatal
// one (a listener that failed) to fatal.
type logAdapter struct {
	l     *slog.Logger
	fatal chan string
}

// Noticef lines (banner, listen addresses) are routine: debug level.
func (a *logAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	a.l.Error(msg)
	select {
	case a.fatal <- msg:
	default:
	}
}
func (a *logAdapter) Errorf(format string, v ...any) { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Debugf(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Tracef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
