package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
)

const serveAbout = `Runs the whole service: records published to transcripts.<session> are
applied to each session's live projection, and ctxd.context.<session>
answers the session's model context.

With no --nats, ctxd starts an embedded NATS server with JetStream (store
under --data, client port --port on --host). With --nats it uses that
server or cluster instead. Either way it creates the TRANSCRIPTS stream
when it is missing, and refuses an existing one that differs in a field it
relies on, naming the field; one with limits that delete records (max_age,
max_msgs, max_bytes, max_msgs_per_subject, discard new) only with
--allow-stream-limits. Once it serves it prints one line:
  ctxd ready nats://HOST:PORT
(and tells systemd READY=1 when run as a Type=notify unit), and it shuts
down cleanly on SIGINT or SIGTERM (exit 0; Ctrl-C while it starts: 130).

--http ADDR serves, for operators: /metrics (Prometheus), /healthz (the
process is alive), /readyz (connected, stream and consumer verified,
ingest running, at most --ready-max-lag records behind the stream) and
/ui/, the inspector (each session's records beside what the model saw; see
ctxd inspect; a view reads at most 8 MiB of records, and lists a larger
session's records without their fates; the views read at most
--inspect-read-rate bytes a second together, 32 MiB by default, so that
the first view of a session of hundreds of MiB takes seconds). It is off unless given. /metrics and /ui/ need the bearer
token --http-token when one is set; listening beyond loopback
(0.0.0.0:9090) requires one. A browser opening /ui/ is sent to /login,
where the token, posted once, is exchanged for an HttpOnly,
SameSite=Strict session cookie (12 hours; /ui/ has a log out button).
The listener answers only the host names it serves: localhost, the
loopback addresses, its own address (any IP address on 0.0.0.0) and
--http-hosts; another name gets 421 unless the request carries the
bearer token, so a web page that rebinds its name to 127.0.0.1 reads
nothing. The probes answer anyone and tell only "ok" or why not.

An embedded server that listens beyond loopback (--host 0.0.0.0, or a
websocket, leafnodes or mqtt listener in --nats-config) needs
authentication: --nats-config FILE with users or accounts (see
deployments/nats/auth.conf), and no no_auth_user. Its monitoring (http_port in that file) has
none, and lists every user and subscription: on loopback only.

Where each user may subscribe only to an inbox prefix of its own (as in
deployments/), give ctxd's with --inbox-prefix (_INBOX_ctxd there): every
JetStream reply and ingest delivery comes to it. A user refused its inbox
stops serve at start, naming it.

Memory: the projections and the rendered replies kept with them take
--cache-bytes at most; the process stays within that plus 64 MiB, plus
192 MiB for the embedded server when it runs one, plus the chains of the
replies' digests (a 32nd of --cache-bytes, at least 16 MiB), and sets the
Go runtime's soft memory limit a 32nd under that bound (--memory-limit
sets another, or off; GOMEMLIMIT in the environment wins), and gives free
memory back to the system after --idle-release of quiet. See
docs/OPERATING.md, "Memory".

Every flag can also be set in the environment: CTXD_ and the flag's name in
upper case with '-' as '_' (CTXD_DATA, CTXD_SYNC, ...); --nats also reads
NATS_URL. A flag on the command line wins.

--sync chooses when the embedded server fsyncs JetStream's files:
  always    before acknowledging each write: an acknowledged record survives
            power loss and OS crashes; slower publishes.
  DURATION  every DURATION (NATS's default is 2m): an acknowledged record
            survives a crash of ctxd or of the NATS process, but an OS crash
            or power loss can lose what was acknowledged since the last sync.`

func runServe(ctx context.Context, e *env, args []string) error {
	cfg := app.DefaultConfig()
	fs := newFlags(e, "serve", "serve [flags]", serveAbout)
	conn := addConnFlags(fs, e, false)
	natsConfig := fs.String("nats-config", "", "embedded server: nats-server configuration `FILE` (accounts, users, TLS); what it sets wins over the flags below")
	fs.StringVar(&cfg.DataDir, "data", cfg.DataDir, "embedded server: JetStream store directory")
	fs.StringVar(&cfg.Host, "host", cfg.Host, "embedded server: address to listen on")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "embedded server: client port (-1 picks a free one)")
	maxPayload := fs.Int("max-payload", int(cfg.MaxPayload), "embedded server: largest message in `BYTES`, 1 to 67108864 (64 MiB)")
	sync := fs.String("sync", cfg.SyncInterval.String(), "embedded server: fsync `POLICY`, always or an interval such as 2m or 1s")
	fs.IntVar(&cfg.Replicas, "replicas", cfg.Replicas, "replicas of the TRANSCRIPTS stream when ctxd creates it (3 on a 3-node cluster)")
	fs.IntVar(&cfg.Partitions, "partitions", 1, "partitions of the TRANSCRIPTS stream when ctxd creates it (1: none; 16 spreads the ingest over up to 16 instances); an existing stream keeps its own, and ctxd partition partitions an existing one")
	fs.BoolVar(&cfg.AllowStreamLimits, "allow-stream-limits", false, "run on an existing TRANSCRIPTS stream with limits (max_age, max_msgs, max_bytes, max_msgs_per_subject, discard new), which ctxd otherwise refuses: records past a limit leave the stream, and with them the contexts of their sessions, which lose those records.")
	browser := fs.String("browser-tools", strings.Join(cfg.BrowserTools, ","), "comma-separated tool names whose screenshots are trimmed to the latest")
	fs.IntVar(&cfg.MaxRecordBytes, "max-record-bytes", cfg.MaxRecordBytes, "largest record decoded; larger ones are skipped and reported")
	fs.IntVar(&cfg.CacheSessions, "cache-sessions", cfg.CacheSessions, "sessions held in memory at most; others load from the stream when asked for")
	fs.Int64Var(&cfg.CacheBytes, "cache-bytes", cfg.CacheBytes, "bytes of session projections held in memory at most (an estimate)")
	fs.IntVar(&cfg.RenderCacheBytes, "render-cache-bytes", cfg.RenderCacheBytes, "largest rendered reply (--format, budget_tokens) kept with a session, in `BYTES`, with what renders its next one; the replies kept count in --cache-bytes (0: none)")
	fs.IntVar(&cfg.MaxLoads, "max-loads", cfg.MaxLoads, "requests loading a session not in memory at once (default from GOMAXPROCS); up to 1024 more queue, past that they are refused with 503")
	fs.IntVar(&cfg.MaxWaiters, "max-waiters", cfg.MaxWaiters, "requests waiting for min_seq at once; past it they are refused with 503 (0: no bound)")
	fs.Float64Var(&cfg.EmptyRate, "empty-rate", cfg.EmptyRate, "answers a second, at most, of no records to requests for sessions never written to (a flood of random ids); past it they wait, and past 1024 waiting are refused with 503 (0: not paced)")
	fs.Int64Var(&cfg.MaxSessionBytes, "max-session-bytes", cfg.MaxSessionBytes, "bytes of records one session may hold since its latest compaction; a record past it is quarantined. Replies of up to twice this, at least 512 MiB, are sent")
	fs.IntVar(&cfg.RejectLog, "rejected-log", cfg.RejectLog, "rejected records ctxd.rejected lists, the latest (all are counted)")
	fs.StringVar(&cfg.HTTPAddr, "http", "", "serve /metrics, /healthz, /readyz and the inspector /ui/ over HTTP on `ADDR` (host:port, e.g. 127.0.0.1:8222; off when empty)")
	fs.StringVar(&cfg.HTTPToken, "http-token", "", "bearer token --http requires on every path but /healthz and /readyz: /metrics (a Prometheus scrape sends it as its bearer token) and the inspector /ui/ (a browser logs in with it at /login); needed to listen beyond loopback (prefer CTXD_HTTP_TOKEN)")
	fs.IntVar(&cfg.InspectReadRate, "inspect-read-rate", cfg.InspectReadRate, "`BYTES` a second the inspector's views read from the stream together, records and the records the server loads to list their sizes; past it they wait, so that a view of a large session never takes the server from the service (below 0: no bound)")
	httpHosts := fs.String("http-hosts", "", "comma-separated host `NAMES` --http serves besides localhost, the loopback addresses and its own address (e.g. ctxd.example.com); a request naming another is refused with 421, unless it carries the token")
	fs.DurationVar(&cfg.ShutdownCheckpoints, "shutdown-checkpoints", cfg.ShutdownCheckpoints, "how long a shutdown writes checkpoints at most, and then snapshots; those not written are counted in one log line each (those sessions load from earlier checkpoints, or by their checkpoints)")
	fs.DurationVar(&cfg.IdleSnapshots, "idle-snapshots", cfg.IdleSnapshots, "how often the ingest writes the snapshots of the sessions that had no record since the time before, so that after a crash their first load reads little (0: the default, below 0: only at shutdown)")
	fs.Uint64Var(&cfg.ReadyMaxLag, "ready-max-lag", cfg.ReadyMaxLag, "records the ingest may be behind the stream and /readyz still say ready")
	level := fs.String("log-level", "info", "log `LEVEL`: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log `FORMAT`: text or json")
	startTimeout := fs.Duration("start-timeout", 5*time.Minute, "how long the start may take at most: connecting, and waiting for JetStream, the stream and the buckets (retried while they are not available); past it, ctxd exits with an error (0: wait until interrupted)")
	memLimit := fs.String("memory-limit", "auto", "the Go runtime's soft memory `LIMIT`: auto is a 32nd under --cache-bytes + 64 MiB, + 192 MiB with the embedded server, + the digests' chains (a 32nd of it, at least 16 MiB; docs/OPERATING.md, \"Memory\"); BYTES such as 2GiB; off for none. GOMEMLIMIT in the environment wins")
	idleRelease := fs.Duration("idle-release", 30*time.Second, "give the heap's free memory back to the system once the process has been quiet this long (allocated less than 4 MiB); 0: leave it to the runtime")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the process, from start to shutdown, to `FILE` (go tool pprof reads it)")
	memprofile := fs.String("memprofile", "", "write a heap profile of the process, as it is when shutdown begins, to `FILE` (go tool pprof reads it)")
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(e, "serve", pos); err != nil {
		return err
	}
	url, opts, err := conn.resolve(e, fs)
	if err != nil {
		return usageError(e, "serve", err)
	}
	cfg.NATSURL, cfg.NATSOptions = url, opts
	cfg.NATSConfigFile = *natsConfig
	if url != "" && *natsConfig != "" {
		return usageError(e, "serve", errors.New("--nats-config configures the embedded server: not with --nats"))
	}
	cfg.Version = serviceVersion()
	if *maxPayload < 1 || *maxPayload > 64<<20 {
		return usageError(e, "serve", fmt.Errorf("--max-payload: want 1 to 67108864 bytes (64 MiB, NATS's limit), got %d", *maxPayload))
	}
	cfg.MaxPayload = int32(*maxPayload)
	cfg.BrowserTools = splitList(*browser)
	cfg.HTTPHosts = splitList(*httpHosts)
	for _, h := range cfg.HTTPHosts {
		if strings.ContainsAny(h, "/:@ ") && !strings.HasPrefix(h, "[") {
			return usageError(e, "serve", fmt.Errorf("--http-hosts: want host names without scheme or port (ctxd.example.com), got %q", h))
		}
	}
	if *sync == "always" {
		cfg.SyncAlways = true
	} else {
		d, err := time.ParseDuration(*sync)
		if err != nil || d <= 0 {
			return usageError(e, "serve", fmt.Errorf("--sync: want \"always\" or a positive duration such as 2m or 1s, got %q", *sync))
		}
		cfg.SyncInterval = d
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return usageError(e, "serve", fmt.Errorf("--log-level: %w", err))
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	switch *logFormat {
	case "text":
		cfg.Logger = slog.New(slog.NewTextHandler(e.stderr, hopts))
	case "json":
		cfg.Logger = slog.New(slog.NewJSONHandler(e.stderr, hopts))
	default:
		return usageError(e, "serve", fmt.Errorf("--log-format: want text or json, got %q", *logFormat))
	}

	if *cpuprofile != "" {
		stop, err := startCPUProfile(*cpuprofile)
		if err != nil {
			return err
		}
		defer func() {
			if err := stop(); err != nil {
				cfg.Logger.Warn("cpu profile", "err", err)
			}
		}()
	}
	limit, err := chooseMemoryLimit(*memLimit, os.Getenv("GOMEMLIMIT"), cfg.CacheBytes, cfg.NATSURL == "")
	if err != nil {
		return usageError(e, "serve", err)
	}
	if *idleRelease < 0 {
		return usageError(e, "serve", fmt.Errorf("--idle-release: want 0 (off) or a positive duration such as 30s, got %s", *idleRelease))
	}
	if limit.bytes > 0 {
		if limit.from != "GOMEMLIMIT" {
			debug.SetMemoryLimit(limit.bytes)
		}
		cfg.Logger.Info("memory limit", "bytes", limit.bytes, "from", limit.from)
	} else {
		cfg.Logger.Info("no memory limit", "from", limit.from)
	}
	if *idleRelease > 0 {
		idleCtx, stopIdle := context.WithCancel(ctx)
		idleDone := make(chan struct{})
		go func() { defer close(idleDone); returnWhenIdle(idleCtx, *idleRelease) }()
		defer func() { stopIdle(); <-idleDone }()
	}
	if *startTimeout < 0 {
		return usageError(e, "serve", fmt.Errorf("--start-timeout: want 0 (no bound) or a positive duration such as 1m, got %s", *startTimeout))
	}
	// The start's context lives on with the service: only the timer
	// that would end it stops once it is up.
	startCtx, endStart := context.WithCancelCause(ctx)
	defer endStart(nil)
	stopTimer := func() bool { return false }
	if *startTimeout > 0 {
		stopTimer = time.AfterFunc(*startTimeout, func() { endStart(&timeoutError{flag: "--start-timeout", d: *startTimeout}) }).Stop
	}
	a := app.New(cfg)
	err = a.Open(startCtx)
	if !stopTimer() && err == nil && context.Cause(startCtx) != nil && ctx.Err() == nil {
		// Up just as the bound passed: what it started has ended.
		err = errors.Join(context.Cause(startCtx), a.Close())
	}
	if err != nil {
		var te *timeoutError
		if !errors.As(err, &te) && errors.As(context.Cause(startCtx), &te) && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", te, err)
		}
		if errors.Is(err, bus.ErrLimit) {
			return fmt.Errorf("%w\n(--allow-stream-limits runs on it all the same: records past a limit leave the stream, and with them the contexts of their sessions)", err)
		}
		if errors.Is(err, client.ErrInboxRefused) {
			return fmt.Errorf("%w; --inbox-prefix sets it", err)
		}
		if cfg.NATSURL == "" {
			err = withDataHint(err, cfg.DataDir)
		}
		return err
	}
	if addr := a.HTTPListenAddr(); addr != "" {
		cfg.Logger.Info("http listening", "addr", addr, "paths", "/metrics /healthz /readyz /ui/")
	}
	fmt.Fprintf(e.stdout, "ctxd ready %s\n", a.URL())
	if err := sdNotify(e, "READY=1"); err != nil {
		cfg.Logger.Warn("systemd notify", "err", err)
	}
	select {
	case <-ctx.Done():
	case <-a.Failed():
		// Stop loudly: a supervisor starts ctxd again.
		_ = sdNotify(e, "STOPPING=1")
		return errors.Join(a.Err(), a.Close())
	}
	cfg.Logger.Info("shutting down")
	if *memprofile != "" {
		if err := writeHeapProfile(*memprofile); err != nil {
			cfg.Logger.Warn("heap profile", "err", err)
		}
	}
	_ = sdNotify(e, "STOPPING=1")
	return a.Close()
}

// startCPUProfile profiles the process's CPU to file until the returned
// stop is called.
func startCPUProfile(file string) (stop func() error, err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// writeHeapProfile writes the heap profile as of the last collection.
func writeHeapProfile(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--memprofile: %w", err)
	}
	return f.Close()
}

// envName is the environment variable of a flag: CTXD_MAX_PAYLOAD for
// max-payload.
func envName(flagName string) string {
	return "CTXD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// usageError prints err as a command-line error and returns errUsage.
func usageError(e *env, name string, err error) error {
	fmt.Fprintf(e.stderr, "ctxd %s: %v\n", name, err)
	return errUsage
}

// envDefaults sets each flag not given on the command line from
// CTXD_<NAME>, before parsing, so the command line still wins.
func envDefaults(fs *flag.FlagSet, e *env) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v := e.getenv(name); v != "" && err == nil {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
			f.DefValue = v
		}
	})
	return err
}
