// Package app wires ctxd together: the NATS server (embedded or not), the
// stream and its ingest, the live projections and the request-reply
// service. cmd/ctxd and the integration tests both run it.
//
// It only wires; each job is another package's, and each of those knows
// the others only through what app hands it:
//
//	bus         the one package that talks JetStream: the stream's handle
//	            (bus.SetUp), its consumers and ingests, pins, lag, the
//	            watch of its layout, the checkpoint and snapshot
//	            buckets, validated reads
//	ownership   who applies what: the roles of the instance (the ingest
//	            store while the pin is held, the follower, the reader),
//	            the partitions' balancer, handbacks and the count of the
//	            live instances; it answers the service (server.Reacher)
//	removals    the removal watcher: purges and deletions applied to the
//	            stores ownership lists
//	store       the projections of the sessions, loaded through app's
//	            streamLoader (loader.go), the one place store and bus meet
//	server      the request-reply service over ownership's roles
//	ops         the operators' listener: metrics, health, readiness
//
// What app itself holds: Config and its defaults (config.go), Open and
// Close (app.go), the retries of a JetStream that is starting (start.go),
// the snapshots written at shutdown and when idle (snapshots.go), the readiness and metrics
// (ops.go) and the inspector's source (inspect.go). The ingests are
// ownership's, one path for every stream: one a partition held, pulled
// by its balancer (Roles.OpenIngest), an unpartitioned stream being one
// partition, its consumer the stream's own.
//
// Close owns the app's root context (life): every goroutine app and the
// packages it starts run under it, and Close ends it once nothing uses
// it, then waits for them. No lock is held across a JetStream request.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/ops"
	"github.com/ctxd/ctxd/pkg/ownership"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/removals"
	"github.com/ctxd/ctxd/pkg/server"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/streams"
)

// ErrLayoutChanged is why an instance stops when the stream's layout is
// not the one it started with (bus.ErrLayoutChanged).
var ErrLayoutChanged = bus.ErrLayoutChanged

// App is a running ctxd.
type App struct {
	Config

	ns     *natsd.Server
	nc     *nats.Conn
	st     *bus.Stream
	stream string
	loader *streamLoader
	roles  *ownership.Roles
	// running is the roles from the ingest's start until Close hands its
	// partitions back, for the connection's handlers.
	running atomic.Pointer[ownership.Roles]
	svc     *server.Service
	closed  chan struct{} // closed when the connection is

	ops *ops.Server
	// inspector is mounted at /ui/ on ops unless HTTPHandlers take it.
	inspector *inspector
	// url is the NATS server the app connected to; the inspector's
	// connection goes there too.
	url string
	// inspectConn is the inspector's connection (inspect.go).
	inspectConn inspectConn
	metrics     *ops.Metrics
	// serving is set once Open has started everything.
	serving atomic.Bool
	// failed is closed, and failErr set, when the app cannot go on.
	failed  chan struct{}
	failErr atomic.Pointer[error]

	// removals applies the stream's purges and deletions to the stores
	// (package removals).
	removals *removals.Watcher
	// layout stops the instance when the stream's partitions change
	// (bus.LayoutWatch); layoutErr, once set, answers every request.
	layout    *bus.LayoutWatch
	layoutErr atomic.Pointer[error]
	// snapsDrops counts the emptyings of the snapshot bucket asked for
	// since the one running began (dropSnapshots); 0: none runs.
	snapsDrops atomic.Int32
	// idleSnaps writes the snapshots of idle sessions behind the ingest.
	idleSnaps *idleSnapshots
	// evictLabel is the removed count the stores write the snapshots
	// of evicted sessions at (evictSnapshotLabel); nil writes none.
	evictLabel atomic.Pointer[uint64]

	// life is the context of the app's background work, cancelled by
	// Close (end) once what uses it has stopped; bg counts the
	// goroutines of that work Close waits for.
	life context.Context
	end  context.CancelFunc
	bg   sync.WaitGroup
	// emptySnapshots empties the snapshot bucket (purgeSnapshots).
	emptySnapshots func(ctx context.Context)
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
	a := &App{Config: cfg, failed: make(chan struct{})}
	a.life, a.end = context.WithCancel(context.Background())
	a.emptySnapshots = a.purgeSnapshots
	return a
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
	if a.HTTPAddr != "" {
		// First, so that a port in use fails at once and /healthz answers
		// while the rest starts.
		if err := a.openHTTP(); err != nil {
			return err
		}
	}
	url := a.NATSURL
	if url == "" {
		a.ns = natsd.New(a.DataDir)
		a.ns.Host, a.ns.Port = a.Host, a.Port
		a.ns.MaxPayload = a.MaxPayload
		a.ns.SyncAlways, a.ns.SyncInterval = a.SyncAlways, a.SyncInterval
		a.ns.Logger = a.Logger.With("component", "nats-server")
		a.ns.ConfigFile = a.NATSConfigFile
		if err := a.ns.OpenContext(ctx); err != nil {
			return err
		}
		url = a.ns.ClientURL()
	}
	closed := make(chan struct{})
	a.closed = closed
	log := a.Logger
	opts := []nats.Option{nats.Name("ctxd " + a.Instance), nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A server that freezes (its process stopped, its machine hung)
		// keeps the connection open: only unanswered pings tell, here
		// within about 6 s, after which the connection moves to another
		// server of the cluster.
		nats.PingInterval(2 * time.Second), nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil {
				log.Debug("nats disconnected: the connection was closed") // a drain at shutdown; the closed handler says so
			} else {
				log.Warn("nats disconnected", "err", err)
			}
			// Until records of the pin come again, or another pin's,
			// the ingest store is not trusted: requests read the stream.
			if r := a.running.Load(); r != nil {
				r.Disconnected()
			}
		}),
		// A permissions violation (a subject the user may not use) and a
		// slow consumer come only here: logged, not printed by nats.go.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warn("nats error", "err", err, "subject", sub.Subject)
				return
			}
			log.Warn("nats error", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted(), "server", nc.ConnectedServerName())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			log.Info("nats connection closed")
			close(closed)
		})}
	a.nc, err = nats.Connect(url, append(opts, a.NATSOptions...)...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", Redact(url), RedactError(url, err))
	}
	a.url = url
	// Every JetStream reply and ingest delivery comes to the
	// connection's inboxes: a user refused them is told now, not by a
	// timeout.
	if err := client.CheckInbox(ctx, a.nc); err != nil {
		return fmt.Errorf("connect to %s: %w", Redact(url), RedactError(url, err))
	}
	want, err := streams.Transcripts()
	if err != nil {
		return err
	}
	if a.Replicas > 0 {
		want.Replicas = a.Replicas
	}
	if a.Partitions > 1 {
		want.SubjectTransform = streams.PartitionTransform(a.Partitions)
	}
	var check []bus.CheckOption
	limited := false // the stream removes records of its own accord
	if a.AllowStreamLimits {
		check = append(check, bus.AllowLimits(func(fe *bus.FieldError) {
			limited = true
			a.Logger.Warn("stream limit accepted: records past it leave the stream, and with them the contexts of their sessions", "stream", want.Name, "field", fe.Field, "value", fe.Have)
		}))
	}
	var st *bus.Stream
	err = a.retryStart(ctx, url, "stream "+want.Name, func(ctx context.Context) error {
		st, err = bus.SetUp(ctx, a.nc, want, check...)
		return err
	})
	if err != nil {
		return err
	}
	if have := st.Replicas(); a.Replicas > 0 && have != a.Replicas {
		a.Logger.Warn("the existing stream has another number of replicas than --replicas; ctxd leaves it as it is",
			"stream", want.Name, "replicas", have, "want", a.Replicas)
	}
	var cps *bus.Checkpoints
	err = a.retryStart(ctx, url, "checkpoint bucket", func(ctx context.Context) error {
		cps, err = st.CheckpointBucket(ctx, a.Replicas)
		return err
	})
	if err != nil {
		return err
	}

	layout, err := st.Layout()
	if err != nil {
		return err
	}
	if a.Partitions > 1 && layout.P != a.Partitions {
		return fmt.Errorf("%w: stream %s has %d partition(s), not %d: the number is the stream's, fixed for its life (ctxd partition moves an unpartitioned stream)", bus.ErrIncompatible, want.Name, layout.P, a.Partitions)
	}
	// A partitioning stopped half way leaves records where this layout
	// does not look: refused, until ctxd partition finishes it.
	err = a.retryStart(ctx, url, "stream "+want.Name, func(ctx context.Context) error {
		return bus.CheckLayout(ctx, a.nc, layout)
	})
	if err != nil {
		return err
	}

	var snaps *bus.Snapshots
	err = a.retryStart(ctx, url, "snapshot bucket", func(ctx context.Context) error {
		snaps, err = st.SnapshotBucket(ctx, a.Replicas)
		return err
	})
	if err != nil {
		return err
	}

	a.st, a.stream = st, want.Name
	a.loader = &streamLoader{nc: a.nc, stream: want.Name, cps: cps, layout: layout,
		snaps: snaps, identity: cps.Stream}
	a.layout = st.WatchLayout(a.life, layout, a.Logger, func(err error) {
		a.layoutErr.Store(&err)
		a.fail(err)
	})
	a.roles = ownership.New(ownership.Config{
		Layout: layout, Conn: a.nc, Stream: st, Instance: a.Instance, Logger: a.Logger, Life: a.life,
		Fail: a.fail,
		Stopped: func() error {
			if err := a.layoutErr.Load(); err != nil {
				return *err
			}
			return nil
		},
		Retry: func(ctx context.Context, what string, fn func(ctx context.Context) error) error {
			return a.retryStart(ctx, a.nc.ConnectedUrl(), what, fn)
		},
		NewStore: a.newStore, ReadOnly: readOnly{a.loader},
		CacheBytes: a.CacheBytes, CacheSessions: a.CacheSessions,
	})
	// Before the ingest and the service: no record is applied, and no
	// session read, that a removal before it could have touched.
	counted := !limited && !st.AllowsMsgTTL()
	err = a.retryStart(ctx, url, "removal watcher", func(ctx context.Context) error {
		a.removals, err = removals.Open(ctx, a.life, a.nc, want.Name, counted, a.roles.Stores, a.dropSnapshots, a.Logger)
		return err
	})
	if err != nil {
		return err
	}
	a.roles.Removals = a.removals
	a.sweepSnapshots(ctx)
	a.setEvictLabel()
	a.idleSnaps = startIdleSnapshots(a)

	// Every record stored so far can be read from the stream: a session
	// loads from there when it is asked for, so nothing is replayed here.
	var last, msgs uint64
	err = a.retryStart(ctx, url, "stream "+want.Name, func(ctx context.Context) error {
		last, msgs, err = st.State(ctx)
		return err
	})
	if err != nil {
		return err
	}
	a.roles.Start(last)
	a.logInfo("stream open", "stream", want.Name, "last_seq", last, "records", msgs, "instance", a.Instance, "partitions", layout.P)
	// Every partition's consumer (an unpartitioned stream's one) is made
	// if missing, and the instance pulls as ceil(P / live instances)
	// allows: from an unpartitioned stream's consumer, always.
	if err := a.roles.OpenIngest(ctx, last); err != nil {
		return err
	}
	a.running.Store(a.roles)
	// The service exists before any partition is gained: it serves the
	// partition endpoints of those gained before it opens once it does.
	a.svc = server.New(a.nc, a.roles)
	a.roles.Balance(a.svc)
	return a.openService()
}

// openService starts the request-reply service.
func (a *App) openService() error {
	if a.svc == nil {
		a.svc = server.New(a.nc, a.roles)
	}
	a.svc.Logger = a.Logger
	a.svc.BrowserTools = a.BrowserTools // the projections' own
	a.svc.RenderCacheBytes = a.RenderCacheBytes
	a.svc.DigestBytes = DigestBytes(a.CacheBytes)
	if a.Version != "" {
		a.svc.Version = a.Version
	}
	if a.metrics != nil {
		a.svc.Observe = a.metrics.Observe
	}
	a.svc.MaxLoads, a.svc.MaxWaiters = a.MaxLoads, a.MaxWaiters
	// A session within its bound has a reply about as large as its
	// records: twice that is sent, whatever the format.
	a.svc.MaxReplyBytes = int(max(server.DefaultMaxReplyBytes, 2*a.MaxSessionBytes))
	a.svc.MissRate = a.EmptyRate
	a.svc.Instance, a.svc.Stream = a.Instance, a.stream
	// A stopping instance finishes the reads in hand: with other
	// instances on the stream, a request's wait ends well within this.
	a.svc.CloseGrace = 2 * time.Second
	a.svc.Role = a.roles.Role
	if a.roles.Partitioned() {
		a.svc.Partitions = a.loader.layout.P
		a.svc.Owned = a.roles.Owned
	}
	// Open returns once the server holds the service's subscriptions: a
	// request sent right after finds a responder.
	if err := a.svc.Open(); err != nil {
		return err
	}
	a.serving.Store(true)
	return nil
}

// newStore returns a store of projections loaded from the stream.
func (a *App) newStore() *store.Store {
	s := store.New()
	s.Options = projection.Options{BrowserTools: a.BrowserTools}
	// Records come from NATS messages, each its own copy that nothing
	// writes again: their strings, screenshots among them, are decoded
	// without copying them. A record is held decoded until its session
	// settles (a few records later), then as its JSON rendering; what a
	// session keeps beyond that is copied (see projection/shed.go).
	s.Decoder = record.Decoder{MaxBytes: a.MaxRecordBytes, ShareInput: true, ShareShort: true}
	s.Loader = a.loader
	s.MaxSessions, s.MaxBytes = a.CacheSessions, a.CacheBytes
	s.MaxSessionBytes = a.MaxSessionBytes
	s.Logger = a.Logger
	s.RejectLog = a.RejectLog
	if a.loader != nil && a.loader.snaps != nil {
		s.EvictSnapshots, s.SnapshotsWritten = a.evictSnapshotLabel, a.evictSnapshotsWritten
	}
	if a.loader != nil {
		s.SubjectOf = a.loader.layout.SubjectAt // rejections name the stored subject
	}
	if a.roles != nil && a.roles.Reader() != nil {
		// One list of rejected records for the instance, whichever
		// store met them.
		s.ShareRejections(a.roles.Reader())
	}
	return s
}

// URL returns the NATS client URL ctxd is connected to, without the
// credentials it may hold.
func (a *App) URL() string {
	if a.nc == nil {
		return ""
	}
	return a.nc.ConnectedUrlRedacted()
}

// Failed is closed when the app can no longer do its work and must be
// started again (its ingest consumer was deleted); Err says why.
func (a *App) Failed() <-chan struct{} { return a.failed }

// Err returns why Failed is closed, or nil.
func (a *App) Err() error {
	if err := a.failErr.Load(); err != nil {
		return *err
	}
	return nil
}

// fail records the first reason the app cannot go on and closes Failed.
func (a *App) fail(err error) {
	if a.failErr.CompareAndSwap(nil, &err) {
		a.Logger.Error("ctxd cannot go on", "err", err)
		close(a.failed)
	}
}

// Serving reports whether Open has finished and Close has not begun.
// When it is true, Store may be called from any goroutine.
func (a *App) Serving() bool { return a.serving.Load() }

// Store returns the projections the instance answers from now: the
// ingest's while it holds the pin, else the reader's.
func (a *App) Store() *store.Store {
	if a.roles == nil {
		return nil
	}
	return a.roles.Current()
}

// Stats counts the instance's work over all its stores: the ingest's
// and the reader's, as $SRV.STATS and /metrics report it.
func (a *App) Stats() store.Stats {
	if a.roles == nil {
		return store.Stats{}
	}
	return a.roles.Stats()
}

// Wait returns once this instance's ingest has applied every record up
// to seq, or an error wrapping store.ErrWaitExpired after timeout. An
// instance ingests once JetStream pins the consumer to it, at the first
// record delivered; with other instances on the stream, it may never.
func (a *App) Wait(ctx context.Context, seq uint64, timeout time.Duration) error {
	return a.roles.Wait(ctx, seq, timeout)
}

// Close stops everything Open started: the HTTP listener first (its
// handlers read what follows), the partitions held (an unpartitioned
// stream's one: the other instances told on a partitioned stream, the
// pins given back at once, so that another instance ingests without
// waiting for the pinned TTL, the pulls stopped), then in reverse order
// the service (requests in hand are answered, from the follower or
// through the stream), the checkpoints of the partitions handed back
// (every changed session's written in bulk, within ShutdownCheckpoints;
// one line says how many were written and how many were not), their
// snapshots (as the checkpoints), the connection, the server.
func (a *App) Close() error {
	a.serving.Store(false)
	var errs []error
	if a.ops != nil {
		// First: its handlers read the connection and the store, and
		// after Close returns none runs. The inspector's event streams
		// end first, or they would hold the listener's shutdown.
		if a.inspector != nil {
			a.inspector.close()
			a.inspector = nil
		}
		errs = append(errs, a.ops.Close())
		a.ops = nil
	}
	a.idleSnaps.stop() // before the snapshots at shutdown
	a.idleSnaps = nil
	var held []*store.Store
	var heldLabel snapshotLabel
	if a.running.Swap(nil) != nil {
		// Their snapshots' removed count, read while the removals still
		// concern their stores: handed back, they miss those after.
		heldLabel = a.snapshotLabel()
		// The partitions held first (an unpartitioned stream's one), at
		// once: other instances apply them while this one finishes the
		// requests in hand, from its follower or through the stream.
		held = a.roles.HandBack()
	}
	if a.svc != nil {
		errs = append(errs, a.svc.Close())
		a.svc = nil
	}
	if a.roles != nil {
		// No request reads it any more, and none starts after.
		a.roles.StopFollower()
	}
	if len(held) > 0 {
		a.closeCheckpoints(held...)
		a.closeSnapshots(heldLabel, held...)
		for _, st := range held {
			st.Close() // and their evicted sessions' snapshots, before the connection goes
		}
	}
	// Nothing applies records or answers requests any more: the
	// background work still under way stops, and is waited for.
	a.end()
	if a.removals != nil {
		a.removals.Close()
		a.removals = nil
	}
	a.bg.Wait()
	a.layout.Close()
	a.layout = nil
	if a.roles != nil {
		// The reader writes only the checkpoints that replace ones its
		// loads found wrong: those it holds are written before it stops,
		// or the next load finds the wrong one again.
		// Past the end of life: derived from it, not ended by it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(a.life), 2*time.Second)
		if _, left, err := a.roles.Reader().CloseCheckpoints(ctx); left > 0 {
			a.Logger.Warn("checkpoints at shutdown: corrections of the reader not written; the next load finds the wrong ones again", "not_written", left, "err", err)
		}
		cancel()
		errs = append(errs, a.roles.Reader().Close())
	}
	a.inspectConn.close() // after the listener: no view reads any more
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

// closeCheckpoints writes the ingest stores' checkpoints (the stream's,
// or the partitions' this instance applied) within ShutdownCheckpoints
// and stops their writers. Checkpoints not written are no error: a
// checkpoint is a hint, and a session without its latest one loads from
// an earlier one or from its first record, reading more of the stream,
// to the same context.
func (a *App) closeCheckpoints(sts ...*store.Store) {
	within := a.ShutdownCheckpoints
	if within <= 0 {
		within = DefaultShutdownCheckpoints
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(a.life, within) // Close calls it before the end of life
	written, left, err := closeEach(sts, func(st *store.Store) (int, int, error) { return st.CloseCheckpoints(ctx) })
	cancel()
	took := time.Since(start).Round(time.Millisecond)
	var stores []any
	if len(sts) > 1 {
		stores = []any{"partitions", len(sts)}
	}
	if left == 0 {
		a.Logger.Info("checkpoints at shutdown: all written", append([]any{"written", written, "took", took}, stores...)...)
		return
	}
	a.Logger.Warn("checkpoints at shutdown: some not written; those sessions load from earlier checkpoints, reading more of the stream",
		append([]any{"written", written, "not_written", left, "took", took, "err", err}, stores...)...)
}

func (a *App) logInfo(msg string, args ...any) {
	a.Logger.Info(msg, args...)
}
