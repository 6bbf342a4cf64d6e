package app

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/ctxd/ctxd/pkg/inspect"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/server"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/nats-io/nats.go"
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
	// Partitions of the TRANSCRIPTS stream when ctxd creates it (0 or 1:
	// none). An existing stream keeps its own; one with another number
	// than a Partitions above 1 is refused (ctxd partition moves an
	// unpartitioned one).
	Partitions int
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
	// RenderCacheBytes is the largest rendered reply the service keeps
	// with a session; the replies kept count in CacheBytes. 0 keeps none.
	RenderCacheBytes int
	// MaxLoads bounds the requests loading a session at once; more wait
	// in a queue, and past it are refused with 503 (server.Service).
	MaxLoads int
	// MaxWaiters bounds the requests waiting for min_seq at once; past it
	// they are refused with 503.
	MaxWaiters int
	// EmptyRate paces the answers of no records to requests that took the
	// load lane (sessions never written to): at most this many a second
	// (server.Service.MissRate); 0 does not pace them.
	EmptyRate float64
	// MaxSessionBytes bounds one session's records since its latest
	// compaction; a record past it is quarantined.
	MaxSessionBytes int64
	// Instance names this instance in $SRV.STATS, ctxd.rejected and its
	// NATS connection; New makes an empty one host:pid.
	Instance string
	// Logger receives ctxd's log lines; New makes a nil one discard them.
	Logger *slog.Logger

	// NATSOptions are added to the connection's options: credentials and
	// TLS for a server that asks for them.
	NATSOptions []nats.Option
	// NATSConfigFile, for the embedded server, is a nats-server
	// configuration file (accounts, users, TLS) applied under the flags.
	NATSConfigFile string
	// RejectLog is how many rejected records ctxd.rejected lists.
	RejectLog int
	// Version is the version the service reports in $SRV.INFO.
	Version string

	// HTTPAddr, when set, is where the operators' HTTP listener serves
	// /metrics, /healthz, /readyz and HTTPHandlers (package ops).
	HTTPAddr string
	// HTTPToken, when set, is the bearer token the listener requires on
	// every path but /healthz and /readyz; without it the listener
	// refuses an address beyond loopback.
	HTTPToken string
	// HTTPHosts are host names the listener serves besides localhost,
	// the loopback addresses and the address it listens on; requests for
	// others are refused (see package ops).
	HTTPHosts []string
	// InspectReadRate bounds the bytes a second the inspector's views
	// read from the stream together (inspect.Options.ReadRate): below 0,
	// no bound.
	InspectReadRate int
	// HTTPHandlers are mounted on the listener, behind its token, by
	// pattern: {"/ui/": inspector} serves an inspector at /ui/. They are
	// served from the start of Open: one that reads the app checks
	// Serving first.
	HTTPHandlers map[string]http.Handler
	// ReadyMaxLag is how many records the ingest may be behind the stream
	// and still be ready; past it /readyz says not ready.
	ReadyMaxLag uint64
	// ShutdownCheckpoints is how long Close writes checkpoints at most,
	// and then as long for snapshots; those not written by then are
	// counted in one log line and left (a session without its latest
	// checkpoint loads from an earlier one, and one without its snapshot
	// by its checkpoint, reading more of the stream). 0 means
	// DefaultShutdownCheckpoints.
	ShutdownCheckpoints time.Duration
	// IdleSnapshots is how often the ingest writes the snapshots of the
	// sessions that had no record since the time before (so that after a
	// crash they load from them); 0 means DefaultIdleSnapshots, below 0
	// none are written but at shutdown.
	IdleSnapshots time.Duration
}

// DefaultIdleSnapshots is how often idle sessions' snapshots are written.
const DefaultIdleSnapshots = 10 * time.Second

// DefaultShutdownCheckpoints is how long Close writes checkpoints at most.
const DefaultShutdownCheckpoints = 5 * time.Second

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
		MaxLoads:         server.DefaultMaxLoads,
		MaxWaiters:       server.DefaultMaxWaiters,
		EmptyRate:        server.DefaultMissRate,
		MaxSessionBytes:  store.DefaultMaxSessionBytes,
		RejectLog:        store.DefaultRejectLog,
		ReadyMaxLag:      DefaultReadyMaxLag,
		InspectReadRate:  inspect.DefaultReadRate,

		ShutdownCheckpoints: DefaultShutdownCheckpoints,
		IdleSnapshots:       DefaultIdleSnapshots,
	}
}

// DefaultReadyMaxLag is how far behind the stream the ingest may be and
// still be ready.
const DefaultReadyMaxLag = 1000

// DigestBytes is the memory the service keeps the chains of digests of
// its replies in (server.Service.DigestBytes): a 32nd of the cache's
// bound, at least server.DefaultDigestBytes. The chains describe the
// sessions in the cache, about 40 bytes a message of a reply and 32 of
// the one before: agents that take many sessions in turn each meet the
// chain of the session they ask for, where a bound smaller than the
// cached sessions' chains would evict, least recently asked first, the
// very chain asked for next.
func DigestBytes(cacheBytes int64) int64 {
	return max(server.DefaultDigestBytes, cacheBytes/32)
}
