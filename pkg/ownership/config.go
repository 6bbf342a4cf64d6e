package ownership

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
)

// Config is what Roles is given: the stream, what it needs of the rest
// of the instance, and the bounds of its stores.
type Config struct {
	// Layout is the stream's, as it was when the instance started.
	Layout bus.Layout
	// Conn reads the stream (a session's last record, a partition's
	// skipped records) and reaches the other instances.
	Conn *nats.Conn
	// Stream is the stream's handle: its state, its follower, its lag.
	Stream *bus.Stream
	// Instance names this instance, as its service's metadata does.
	Instance string
	// Logger receives the roles' log lines.
	Logger *slog.Logger
	// Life is the context of the instance's background work; its end
	// stops what reads the stream meanwhile.
	Life context.Context
	// Fail stops the instance loudly: an ingest consumer was deleted.
	Fail func(error)
	// Stopped, when it returns an error, is why no request is answered
	// any more (the stream's layout changed).
	Stopped func() error
	// Retry runs a start's JetStream request until it succeeds, fails
	// for good, or ctx ends (the app's retries of a starting cluster).
	Retry func(ctx context.Context, what string, fn func(ctx context.Context) error) error

	// NewStore returns a store of projections loaded from the stream.
	NewStore func() *store.Store
	// ReadOnly loads for the stores that write no checkpoint of their
	// own (the follower's).
	ReadOnly store.Loader
	// CacheBytes and CacheSessions bound the projections held, shared
	// by the partitions an instance holds and by the follower and the
	// reader.
	CacheBytes    int64
	CacheSessions int
}

// Removals is what the roles need of the removal watcher (package
// removals): that every removal before a record is applied before it
// (Cover), and before what a reply shows (Settle, SettleSince); Ahead
// starts the proof of a record a request needs, as the request comes.
type Removals interface {
	Ahead(seq uint64)
	Cover(seq uint64)
	Covered(seq uint64) bool
	Mark() uint64
	Drain()
	Settle(ctx context.Context, read bool, upTo uint64) error
	// SettleSince returns the sequence it proved: upTo, or past it.
	SettleSince(ctx context.Context, mark, upTo uint64) (uint64, error)
	// Verified is the sequence proven so far: every removal made before
	// that record was stored has been applied.
	Verified() uint64
}

// Router serves a partition's endpoint while its ingest store is
// trusted (server.Service).
type Router interface {
	Route(k int, on bool)
}

// Stores returns the stores a removal concerns: the reader's, those
// the ingests feed (one a partition held), and the follower's.
func (r *Roles) Stores() []*store.Store {
	return append(append([]*store.Store{r.reader}, r.IngestStores()...), r.follow.stores()...)
}

// IngestStores returns the stores the ingests feed now.
func (r *Roles) IngestStores() []*store.Store {
	var out []*store.Store
	for _, p := range r.parts {
		if st := p.feeding(); st != nil {
			out = append(out, st)
		}
	}
	return out
}

// New returns the roles of an instance on a stream of cfg.Layout's
// partitions, with a reader store (cfg.NewStore) for the requests that
// read the stream. On an unpartitioned stream a follower answers most
// of what reaches an instance without the pin: the reader store has a
// share of the cache (follow.go). Only the ingest writes checkpoints:
// one writer at a time, but for the moments two instances both think
// they hold the pin; so the reader's loader is cfg.ReadOnly. A miss
// remembered is safe only in a store the ingest feeds: it forgets one as
// it meets the session's first record. The reader's learns of records
// only by reading them, and remembers none.
func New(cfg Config) *Roles {
	r := &Roles{cfg: cfg, layout: cfg.Layout}
	r.reader = cfg.NewStore()
	if !cfg.Layout.Partitioned() {
		r.reader.MaxBytes = readerShare(cfg.CacheBytes)
		r.reader.MaxSessions = readerShare(cfg.CacheSessions)
	}
	r.reader.Loader = cfg.ReadOnly
	r.reader.MissTTL = 0
	r.parts = make([]*part, max(1, cfg.Layout.P))
	for k := range r.parts {
		r.parts[k] = &part{r: r, k: k}
	}
	r.part = r.parts[0]
	r.follow = &following{r: r}
	return r
}

// Reader returns the store of the requests that read the stream.
func (r *Roles) Reader() *store.Store { return r.reader }

// Start sets where the stream was when the instance started: every
// record up to last is stored, and loads read it.
func (r *Roles) Start(last uint64) {
	r.reader.Advance(last)
	r.floor.Store(last)
}

// fail stops the instance loudly.
func (r *Roles) fail(err error) {
	if r.cfg.Fail != nil {
		r.cfg.Fail(err)
	}
}

// IngestStore returns the ingest store of an unpartitioned stream while
// the pin is held, nil otherwise.
func (r *Roles) IngestStore() *store.Store { return r.part.ingestStore() }

// handle applies one stored record of an unpartitioned stream to its
// session in the ingest store: the ingest's bus.Handler.
func (r *Roles) handle(m bus.Msg) {
	r.Removals.Cover(m.Seq)
	// None when the pin was refused while the record was in hand.
	applyRecord(r.part.feeding(), m)
}

// StopFollower stops the follower for good: no request reads it any
// more, and none starts after.
func (r *Roles) StopFollower() { r.follow.close(r.part) }
