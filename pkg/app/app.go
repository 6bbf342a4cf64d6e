// Package app wires ctxd together: the NATS server (embedded or not), the
// JetStream stream and ingest consumer, the live projections and the
// request-reply service. cmd/ctxd and the integration tests both run it.
package app

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/server"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// Config is everything ctxd serve can be told.
type Config struct {
	// NATSURL connects to an existing server or cluster; empty starts the
	// embedded server.
	NATSURL string
	// Embedded server settings, used when NATSURL is empty.
	DataDir      string
	Host         string
	Port         int
	MaxPayload   int32
	SyncAlways   bool
	SyncInterval time.Duration

	// Replicas of the TRANSCRIPTS stream when ctxd creates it.
	Replicas int
	// AllowStreamLimits accepts an existing TRANSCRIPTS stream with limits
	// (max_age, max_msgs, max_bytes, max_msgs_per_subject, discard new):
	// the stream then deletes or refuses records, and the contexts hold
	// only what it keeps. Without it such a stream is refused (bus.ErrLimit).
	AllowStreamLimits bool
	// BrowserTools name the tools whose screenshots are trimmed, and before
	// whose latest screenshot a rendered Anthropic reply places its cache
	// breakpoint.
	BrowserTools []string
	// MaxRecordBytes is the largest record decoded.
	MaxRecordBytes int
	// CacheSessions and CacheBytes bound the projections held in memory;
	// others load from the stream when asked for.
	CacheSessions int
	CacheBytes    int64
	// RenderCacheBytes bounds the rendered replies the service keeps, one
	// per session, beside the projections' CacheBytes; 0 keeps none.
	RenderCacheBytes int
	// MaxSessionBytes bounds one session's records since its latest
	// compaction; a record past it is quarantined.
	MaxSessionBytes int64
	// AckWait is how long the ingest consumer may hold a record before
	// JetStream redelivers it; 0 keeps the definition's (30s).
	AckWait time.Duration
	// Instance names this instance in $SRV.STATS, ctxd.rejected and its
	// NATS connection; New makes an empty one host:pid.
	Instance string
	// Logger receives ctxd's log lines; New makes a nil one discard them.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults of ctxd serve.
func DefaultConfig() Config {
	return Config{
		DataDir:          "./data",
		Host:             natsd.DefaultHost,
		Port:             natsd.DefaultPort,
		MaxPayload:       natsd.DefaultMaxPayload,
		SyncInterval:     natsd.DefaultSyncInterval,
		Replicas:         1,
		BrowserTools:     projection.DefaultBrowserTools,
		MaxRecordBytes:   record.DefaultMaxBytes,
		CacheSessions:    store.DefaultMaxSessions,
		CacheBytes:       store.DefaultMaxBytes,
		RenderCacheBytes: server.DefaultRenderCacheBytes,
		MaxSessionBytes:  store.DefaultMaxSessionBytes,
	}
}

// App is a running ctxd.
type App struct {
	Config

	ns     *natsd.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	st     jetstream.Stream
	stream string
	loader *streamLoader
	roles  *roles
	ingest *bus.Ingest
	// running is the ingest, for the connection's handlers.
	running atomic.Pointer[bus.Ingest]
	svc     *server.Service
	closed  chan struct{} // closed when the connection is
}

// New returns an app with the configuration; Open starts it.
func New(cfg Config) *App {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	return &App{Config: cfg}
}

// Open starts everything, in order: server, connection, stream, the
// projections caught up with the stream, the ingest consumer, and the
// service. When it returns nil, ctxd serves.
func (a *App) Open(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	url := a.NATSURL
	if url == "" {
		a.ns = natsd.New(a.DataDir)
		a.ns.Host, a.ns.Port = a.Host, a.Port
		a.ns.MaxPayload = a.MaxPayload
		a.ns.SyncAlways, a.ns.SyncInterval = a.SyncAlways, a.SyncInterval
		a.ns.Logger = a.Logger.With("component", "nats-server")
		if err := a.ns.Open(); err != nil {
			return err
		}
		url = a.ns.ClientURL()
	}
	closed := make(chan struct{})
	a.closed = closed
	log := a.Logger
	a.nc, err = nats.Connect(url, nats.Name("ctxd "+a.Instance), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.PingInterval(5*time.Second), nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			log.Warn("nats disconnected", "err", err)
			// Until records of the pin come again (the ingest then
			// reads what the connection lost), or another pin's, the
			// ingest store is not trusted: requests read the stream.
			if in := a.running.Load(); in != nil {
				in.Lose("nats disconnected", false)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			log.Info("nats connection closed")
			close(closed)
		}))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	js, err := bus.JetStream(a.nc)
	if err != nil {
		return err
	}
	want, err := streams.Transcripts()
	if err != nil {
		return err
	}
	if a.Replicas > 0 {
		want.Replicas = a.Replicas
	}
	var check []bus.CheckOption
	if a.AllowStreamLimits {
		check = append(check, bus.AllowLimits(func(fe *bus.FieldError) {
			a.Logger.Warn("stream limit accepted: records past it leave the stream, and the contexts", "stream", want.Name, "field", fe.Field, "value", fe.Have)
		}))
	}
	st, err := bus.EnsureStream(ctx, js, want, check...)
	if err != nil {
		return err
	}
	cps, err := bus.OpenCheckpoints(ctx, js, a.Replicas)
	if err != nil {
		return err
	}

	a.js, a.st, a.stream = js, st, want.Name
	a.loader = &streamLoader{nc: a.nc, stream: want.Name, cps: cps}
	a.roles = &roles{a: a, reader: a.newStore()}
	// Only the ingest writes checkpoints: one writer at a time, but for
	// the moments two instances both think they hold the pin.
	a.roles.reader.Loader = readOnly{a.loader}

	// Every record stored so far can be read from the stream: a session
	// loads from there when it is asked for, so nothing is replayed here.
	last, msgs, err := bus.LastSeq(ctx, st)
	if err != nil {
		return err
	}
	a.roles.reader.Advance(last)
	a.roles.floor.Store(last)
	a.logInfo("stream open", "stream", want.Name, "last_seq", last, "records", msgs, "instance", a.Instance)

	// The ingest consumer; a new one starts after the records the stream
	// holds now. Every instance pulls; JetStream delivers to the pinned
	// one, which then makes its ingest store (roles.gained).
	ccfg, err := streams.Ingest()
	if err != nil {
		return err
	}
	if a.AckWait > 0 {
		ccfg.AckWait = a.AckWait
	}
	cons, err := bus.OpenConsumer(ctx, st, ccfg, last)
	if err != nil {
		return err
	}
	readRange := func(from, to uint64, fn func(bus.Msg) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return bus.ReadRange(ctx, a.nc, want.Name, from, to, fn)
	}
	pin := bus.WithPin(bus.Pin{Gained: a.roles.gained, Lost: func(_, reason string, refused bool) { a.roles.lost(reason, refused) }})
	if a.ingest, err = bus.StartIngest(cons, last, readRange, a.handle, a.Logger, pin); err != nil {
		return err
	}
	a.running.Store(a.ingest)
	a.svc = server.New(a.nc, a.roles)
	a.svc.Logger = a.Logger
	a.svc.BrowserTools = a.BrowserTools // the projections' own
	a.svc.RenderCacheBytes = a.RenderCacheBytes
	a.svc.Instance = a.Instance
	// A stopping instance finishes the reads in hand: with other
	// instances on the stream, a request's wait ends well within this.
	a.svc.CloseGrace = 2 * time.Second
	a.svc.Role = a.roles.role
	// Open returns once the server holds the service's subscriptions: a
	// request sent right after finds a responder.
	return a.svc.Open()
}

// newStore returns a store of projections loaded from the stream.
func (a *App) newStore() *store.Store {
	s := store.New()
	s.Options = projection.Options{BrowserTools: a.BrowserTools}
	// Records come from NATS messages, each its own copy that nothing
	// writes again: screenshots are decoded without copying them.
	s.Decoder = record.Decoder{MaxBytes: a.MaxRecordBytes, ShareInput: true}
	s.Loader = a.loader
	s.MaxSessions, s.MaxBytes = a.CacheSessions, a.CacheBytes
	s.MaxSessionBytes = a.MaxSessionBytes
	s.Logger = a.Logger
	return s
}

// handle applies one stored record to its session.
func (a *App) handle(m bus.Msg) {
	session, err := subject.SessionOf(m.Subject, subject.TranscriptsPrefix)
	if err != nil {
		if st := a.roles.feeding(); st != nil {
			st.Reject(store.Rejection{Subject: m.Subject, Seq: m.Seq, Size: len(m.Data), Reason: err.Error()})
		}
		return
	}
	st := a.roles.feeding()
	if st == nil {
		return // the pin was refused while the record was in hand
	}
	st.Apply(session, m.Seq, m.Data)
}

// URL returns the NATS client URL ctxd is connected to.
func (a *App) URL() string {
	if a.nc == nil {
		return ""
	}
	return a.nc.ConnectedUrl()
}

// Store returns the projections the instance answers from now: the
// ingest's while it holds the pin, else the reader's.
func (a *App) Store() *store.Store {
	if a.roles == nil {
		return nil
	}
	return a.roles.current()
}

// Wait returns once this instance's ingest has applied every record up
// to seq, or an error wrapping store.ErrWaitExpired after timeout. An
// instance ingests once JetStream pins the consumer to it, at the first
// record delivered; with other instances on the stream, it may never.
func (a *App) Wait(ctx context.Context, seq uint64, timeout time.Duration) error {
	return a.roles.Wait(ctx, seq, timeout)
}

// Close stops everything Open started, in reverse order: the service
// (requests in hand are answered), the ingest (the record in hand is
// applied and acknowledged), the checkpoints (every session's written,
// within 10s), the pin (given up at once, so another instance ingests
// without waiting for the pinned TTL), the connection, the server.
func (a *App) Close() error {
	var errs []error
	if a.svc != nil {
		errs = append(errs, a.svc.Close())
		a.svc = nil
	}
	if a.ingest != nil {
		owner := a.roles.feeding()
		a.running.Store(nil)
		errs = append(errs, a.ingest.Close())
		a.ingest = nil
		if owner != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			errs = append(errs, owner.SaveCheckpoints(ctx))
			a.unpin(ctx)
			cancel()
			// Stops the checkpoint writer before the connection it writes on.
			a.roles.lost("shutting down", true)
		}
	}
	if a.roles != nil {
		errs = append(errs, a.roles.reader.Close())
	}
	if a.nc != nil {
		if err := a.nc.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			errs = append(errs, err)
		}
		select {
		case <-a.closed:
		case <-time.After(10 * time.Second):
			errs = append(errs, errors.New("nats connection did not drain in 10s"))
		}
		a.nc.Close()
		a.nc = nil
	}
	if a.ns != nil {
		errs = append(errs, a.ns.Close())
		a.ns = nil
	}
	return errors.Join(errs...)
}

// unpin gives up the consumer's pin, when the server says this instance
// holds it, so that another instance ingests at once instead of after
// the pinned TTL.
func (a *App) unpin(ctx context.Context) {
	pin := a.roles.heldPin()
	if pin == "" {
		return
	}
	cons, err := a.st.Consumer(ctx, streams.IngestName)
	if err != nil {
		a.Logger.Warn("unpin the ingest consumer", "err", err)
		return
	}
	for _, g := range cons.CachedInfo().PriorityGroups {
		if g.Group == streams.IngestGroup && g.PinnedClientID == pin {
			if err := a.st.UnpinConsumer(ctx, streams.IngestName, streams.IngestGroup); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				a.Logger.Warn("unpin the ingest consumer", "err", err)
			}
			return
		}
	}
}

func (a *App) logInfo(msg string, args ...any) {
	a.Logger.Info(msg, args...)
}

// streamLoader loads sessions from the stream and the checkpoint bucket:
// where the store and the bus meet.
type streamLoader struct {
	nc     *nats.Conn
	stream string
	cps    *bus.Checkpoints
}

func (l *streamLoader) Checkpoint(ctx context.Context, session string) (store.Checkpoint, bool, error) {
	return l.cps.Get(ctx, session)
}

func (l *streamLoader) SaveCheckpoint(ctx context.Context, session string, cp store.Checkpoint) error {
	return l.cps.Put(ctx, session, cp)
}

// SaveCheckpoints writes a batch of checkpoints pipelined (store.BatchSaver).
func (l *streamLoader) SaveCheckpoints(ctx context.Context, cps iter.Seq2[string, store.Checkpoint]) error {
	return l.cps.PutAll(ctx, cps)
}

func (l *streamLoader) Records(ctx context.Context, session string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	return bus.ReadSubject(ctx, l.nc, l.stream, subject.TranscriptsPrefix+session, from, to, fn)
}

// readOnly is a streamLoader that writes no checkpoint: a checkpoint is
// a hint, and a second writer could only make it older.
type readOnly struct{ *streamLoader }

func (readOnly) SaveCheckpoint(context.Context, string, store.Checkpoint) error { return nil }

func (readOnly) SaveCheckpoints(context.Context, iter.Seq2[string, store.Checkpoint]) error {
	return nil
}

func (l *streamLoader) RecordsAt(ctx context.Context, session string, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	return bus.ReadSeqs(ctx, l.nc, l.stream, seqs, fn)
}
