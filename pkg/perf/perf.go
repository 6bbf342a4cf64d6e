package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/streams"
)

// Figures, in the order Run measures and prints them.
const (
	FigureIngest  = "ingest"
	FigureFetch   = "fetch"
	FigureClients = "clients"
	FigureTurn    = "turn"
	FigureRebuild = "rebuild"
	FigureCold    = "cold"
	FigureMemory  = "memory"
)

// Figures lists every figure.
var Figures = []string{FigureIngest, FigureFetch, FigureClients, FigureTurn, FigureRebuild, FigureCold, FigureMemory}

// The streams of the ingest baselines: TRANSCRIPTS' definition under
// other names and subjects.
const (
	rawStream   = "PERF_RAW" // published to, never consumed
	rawSubject  = "perfraw."
	bareStream  = "PERF_BARE" // consumed by a durable consumer that does nothing
	bareSubject = "perfbare."
	// Read by the ordered consumer of each round only: no other consumer
	// reads what it is measured on.
	orderedStream  = "PERF_ORDERED"
	orderedSubject = "perfordered."
	// The ordered consumer's second run of each round, the figure's A/A,
	// on a stream of its own as every side has.
	againStream  = "PERF_AGAIN"
	againSubject = "perfagain."
)

// Config chooses what a run measures, and how much.
type Config struct {
	// NATSURL runs against an existing server, which must hold none of
	// the streams the run creates and deletes (TRANSCRIPTS, the checkpoint
	// bucket, PERF_RAW, PERF_BARE, PERF_ORDERED, PERF_AGAIN). Empty starts an
	// embedded server in Dir.
	NATSURL string
	// Dir holds the embedded server's files; empty: a temporary directory.
	Dir string
	// Figures to measure; empty means all of Figures.
	Figures []string
	// Rounds is how many times each throughput pair of the clients and
	// rebuild figures is measured, alternating ctxd and baseline; the
	// median is reported.
	Rounds int
	// IngestRounds is how many rounds the ingest figure runs, each side
	// once a round in alternating order; its ratios are the medians of
	// the rounds' ratios (Row.Ratios).
	IngestRounds int

	// Screenshots: base64 length of one, and messages between two, in the
	// ingest, fetch, turn, cold and memory sessions.
	ScreenshotBytes int
	ScreenshotEvery int

	// IngestRecords are published per round, over IngestSessions sessions.
	IngestRecords  int
	IngestSessions int
	// IngestProfiles, when set, is a directory where the ingest figure
	// writes a CPU profile of each side's round, e.g. ctxd-1.prof and
	// ordered-1.prof: what ctxd costs beside what the ordered consumer
	// costs, the server and the publisher in both. It excludes a CPU
	// profile of the whole run.
	IngestProfiles string

	// FetchMessages are the session lengths, in messages since the latest
	// compaction, fetched FetchSamples times each (and as often from the
	// bare responder).
	FetchMessages []int
	FetchSamples  int

	// Clients fetch a session of ClientsMessages messages concurrently,
	// each for ClientsTime per round, then as many from the bare responder.
	Clients         int
	ClientsMessages int
	ClientsTime     time.Duration

	// TurnMessages are the session lengths at which a turn with ctxd
	// (publish the turn's records, then fetch with min_seq) is compared
	// with a turn with a service that rebuilds the context per request,
	// TurnSamples times each; and a fetch with no new records with a
	// rebuild likewise.
	TurnMessages []int
	TurnSamples  int

	// RebuildRecords is the length of the replayed stream, spread evenly
	// over RebuildSessions sessions; its records hold no screenshots.
	RebuildRecords  int
	RebuildSessions int

	// ColdRecords is the length of the stream the cold loads read from,
	// in sessions of ColdSessionRecords records; ColdSamples loads are
	// timed.
	ColdRecords        int
	ColdSessionRecords int
	ColdSamples        int
	// MemorySessions of the cold stream are loaded for the memory figure.
	MemorySessions int
	// MemorySettle is how long the memory figure waits with its sessions
	// loaded before measuring, so that the embedded server's block caches,
	// filled by the loads, expire (after 10s) and do not count.
	MemorySettle time.Duration
	// HeapProfile, when set, is a file the memory figure writes a heap
	// profile to while its sessions are live.
	HeapProfile string

	// Progress receives a line per step; nil discards them.
	Progress io.Writer
}

// Full returns the sizes of the full run.
func Full() Config {
	return Config{
		Rounds:             3,
		IngestRounds:       5,
		ScreenshotBytes:    200 << 10,
		ScreenshotEvery:    100,
		IngestRecords:      100_000,
		IngestSessions:     50,
		FetchMessages:      []int{100, 1000, 10000},
		FetchSamples:       5000,
		Clients:            8,
		ClientsMessages:    1000,
		ClientsTime:        3 * time.Second,
		TurnMessages:       []int{1000},
		TurnSamples:        200,
		RebuildRecords:     1_000_000,
		RebuildSessions:    5000,
		ColdRecords:        200_000,
		ColdSessionRecords: 200,
		ColdSamples:        2000,
		MemorySessions:     500,
		MemorySettle:       11 * time.Second,
	}
}

// Quick returns sizes that finish in about a minute on two cores.
func Quick() Config {
	c := Full()
	c.Rounds = 2
	c.IngestRounds = 3
	c.IngestRecords = 20_000
	c.FetchSamples = 1000
	c.ClientsTime = time.Second
	c.TurnSamples = 50
	c.RebuildRecords = 20_000
	c.RebuildSessions = 100
	c.ColdRecords = 20_000
	c.ColdSamples = 500
	c.MemorySessions = 100
	return c
}

// Check reports what Run refuses in c: an unknown figure, a size out of
// range.
func (c Config) Check() error {
	for _, f := range c.Figures {
		if !slices.Contains(Figures, f) {
			return fmt.Errorf("unknown figure %q (figures: %s)", f, strings.Join(Figures, ", "))
		}
	}
	positive := map[string]int{
		"rounds": c.Rounds, "ingest rounds": c.IngestRounds, "ingest records": c.IngestRecords, "ingest sessions": c.IngestSessions,
		"fetch samples": c.FetchSamples, "clients": c.Clients, "clients messages": c.ClientsMessages,
		"turn samples": c.TurnSamples, "rebuild records": c.RebuildRecords, "rebuild sessions": c.RebuildSessions,
		"cold records": c.ColdRecords, "cold session records": c.ColdSessionRecords, "cold samples": c.ColdSamples,
		"memory sessions": c.MemorySessions,
	}
	for name, v := range positive {
		if v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", name, v)
		}
	}
	for _, n := range append(slices.Clone(c.FetchMessages), c.TurnMessages...) {
		if n < 4 {
			return fmt.Errorf("a session needs at least 4 messages, got %d", n)
		}
	}
	if c.ColdRecords < c.ColdSessionRecords {
		return fmt.Errorf("cold records (%d) must hold at least one session of %d", c.ColdRecords, c.ColdSessionRecords)
	}
	if c.wants(FigureMemory) && c.MemorySessions > c.ColdRecords/c.ColdSessionRecords {
		return fmt.Errorf("memory sessions (%d) must be at most the cold stream's %d sessions", c.MemorySessions, c.ColdRecords/c.ColdSessionRecords)
	}
	if c.ClientsTime <= 0 {
		return errors.New("clients time must be positive")
	}
	if c.MemorySettle < 0 {
		return errors.New("memory settle must not be negative")
	}
	return nil
}

// profile makes the records of the ingest, fetch, turn, cold and memory
// sessions.
func (c Config) profile() workload.Profile {
	return workload.Default.WithScreenshots(c.ScreenshotBytes, c.ScreenshotEvery)
}

func (c Config) wants(figure string) bool {
	return len(c.Figures) == 0 || slices.Contains(c.Figures, figure)
}

// Run measures the figures the configuration selects and returns their
// rows, in the order of Figures.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, progress: cfg.Progress}
	if err := b.open(ctx); err != nil {
		return nil, err
	}
	defer b.close()
	rep := &Report{Machine: machine()}
	type step struct {
		figures []string
		run     func(context.Context) ([]Row, error)
	}
	steps := []step{
		{[]string{FigureIngest}, b.ingest},
		{[]string{FigureFetch, FigureClients, FigureTurn}, b.fetch},
		{[]string{FigureRebuild}, b.rebuild},
		{[]string{FigureCold, FigureMemory}, b.cold},
	}
	for _, s := range steps {
		if !slices.ContainsFunc(s.figures, cfg.wants) {
			continue
		}
		rows, err := s.run(ctx)
		if err != nil {
			return rep, err
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Warnings = b.warnings
	}
	return rep, nil
}

// bench is one run: the server, a client connection, and the app of the
// figure being measured.
type bench struct {
	cfg      Config
	progress io.Writer
	warnings []string

	url     string
	tempDir string
	ns      *natsd.Server
	nc      *nats.Conn
	js      jetstream.JetStream
}

func (b *bench) logf(format string, args ...any) {
	if b.progress != nil {
		fmt.Fprintf(b.progress, format+"\n", args...)
	}
}

// warnf notes something the table's reader must know: it is printed
// under the table.
func (b *bench) warnf(format string, args ...any) {
	b.warnings = append(b.warnings, fmt.Sprintf(format, args...))
	b.logf("WARNING: "+format, args...)
}

// checkApplied warns when ctxd's watermark has passed records it neither
// applied nor rejected: want records published since the store started,
// and the watermark past the last of them.
func (b *bench) checkApplied(figure string, a *app.App, want uint64) {
	if w := passedOver(figure, a.Store().Stats(), want); w != "" {
		b.warnf("%s", w)
	}
}

// passedOver returns the warning for a store that took in other than
// the want records published, or "" when it took in each once. A record
// redelivered counts as a duplicate, not again as taken in, so
// duplicates do not make up for records passed over.
func passedOver(figure string, st store.Stats, want uint64) string {
	switch got := st.Records + st.Rejected; {
	case got < want:
		return fmt.Sprintf("%s: ctxd's watermark is at %d, but it applied %d and rejected %d of the %d records published: %d records were passed over, and the contexts of their sessions lack them (see docs/PERFORMANCE.md, \"Records passed over\")",
			figure, st.Applied, st.Records, st.Rejected, want, want-got)
	case got > want:
		return fmt.Sprintf("%s: ctxd applied %d and rejected %d records, but %d were published: is something else publishing?",
			figure, st.Records, st.Rejected, want)
	}
	return ""
}

func (b *bench) open(ctx context.Context) error {
	b.url = b.cfg.NATSURL
	if b.url == "" {
		dir := b.cfg.Dir
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "ctxd-bench-"); err != nil {
				return err
			}
			b.tempDir = dir
		}
		b.ns = natsd.New(filepath.Join(dir, "nats"))
		b.ns.Port = -1
		if err := b.ns.Open(); err != nil {
			return err
		}
		b.url = b.ns.ClientURL()
	}
	var err error
	if b.nc, err = nats.Connect(b.url, nats.Name("ctxd-bench")); err != nil {
		return fmt.Errorf("connect to %s: %w", b.url, err)
	}
	if b.js, err = jetstream.New(b.nc); err != nil {
		return err
	}
	if b.cfg.NATSURL != "" {
		// The run deletes what it creates: it must not meet anything else's.
		for _, name := range b.streamNames() {
			if _, err := b.js.Stream(ctx, name); err == nil {
				return fmt.Errorf("the server at %s holds a stream %s: the bench creates and deletes its streams, so it needs a server without them", b.url, name)
			} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("look up stream %s: %w", name, err)
			}
		}
	}
	b.logf("nats %s (%s)", b.url, map[bool]string{true: "embedded", false: "external"}[b.ns != nil])
	return nil
}

func (b *bench) streamNames() []string {
	names := []string{rawStream, bareStream, orderedStream, againStream, "KV_" + streams.CheckpointsBucket, "KV_" + streams.SnapshotsBucket}
	if t, err := streams.Transcripts(); err == nil {
		names = append(names, t.Name)
	}
	return names
}

// reset deletes the streams a figure may have filled.
func (b *bench) reset(ctx context.Context) error {
	for _, name := range b.streamNames() {
		if err := b.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s: %w", name, err)
		}
	}
	return nil
}

func (b *bench) close() {
	if b.nc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		b.reset(ctx)
		cancel()
		b.nc.Close()
	}
	if b.ns != nil {
		b.ns.Close()
	}
	if b.tempDir != "" {
		os.RemoveAll(b.tempDir)
	}
}

// startApp runs ctxd, as `ctxd serve` does, on the run's server, on fresh
// streams.
func (b *bench) startApp(ctx context.Context) (*app.App, error) {
	if err := b.reset(ctx); err != nil {
		return nil, err
	}
	cfg := app.DefaultConfig()
	cfg.NATSURL = b.url
	a := app.New(cfg)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := a.Open(ctx); err != nil {
		return nil, fmt.Errorf("start ctxd: %w", err)
	}
	return a, nil
}

// publisher publishes asynchronously on the run's connection and counts
// the publishes that failed after they were sent.
type publisher struct {
	js     jetstream.JetStream
	failed atomic.Int64
	first  atomic.Value // error
}

func (b *bench) newPublisher() (*publisher, error) {
	p := &publisher{}
	js, err := jetstream.New(b.nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			if p.failed.Add(1) == 1 {
				p.first.Store(fmt.Errorf("publish to %s: %w", m.Subject, err))
			}
		}))
	p.js = js
	return p, err
}

// publish publishes n records, record i as next(i), waits for every
// acknowledgement, and returns the last sequence stored.
func (p *publisher) publish(ctx context.Context, n int, next func(i int) (subject string, data []byte)) (uint64, error) {
	var last jetstream.PubAckFuture
	for i := range n {
		subj, data := next(i)
		f, err := p.js.PublishAsync(subj, data, jetstream.WithStallWait(time.Minute))
		if err != nil {
			return 0, fmt.Errorf("publish record %d to %s: %w", i, subj, err)
		}
		last = f
	}
	if last == nil {
		return 0, nil
	}
	select {
	case <-p.js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if n := p.failed.Load(); n > 0 {
		return 0, fmt.Errorf("%d publishes failed, the first: %w", n, p.first.Load().(error))
	}
	select {
	case ack := <-last.Ok():
		return ack.Sequence, nil
	case err := <-last.Err():
		return 0, fmt.Errorf("publish: %w", err)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// pacedBytes bounds the bytes published and not yet applied when a
// stream is filled for a figure that is not about ingest.
const pacedBytes = 16 << 20

// publishPaced publishes like publish, but waits for ctxd to apply what
// it published whenever pacedBytes are outstanding, so that the fill
// measures nothing and meets no backlog. last is the stream's last
// sequence before.
func (p *publisher) publishPaced(ctx context.Context, a *app.App, last uint64, n int, next func(i int) (subject string, data []byte)) (uint64, error) {
	for start := 0; start < n; {
		end, size := start, 0
		for end < n && (end == start || size < pacedBytes) {
			_, data := next(end)
			size += len(data)
			end++
		}
		got, err := p.publish(ctx, end-start, func(i int) (string, []byte) { return next(start + i) })
		if err != nil {
			return 0, err
		}
		if err := a.Wait(ctx, got, 10*time.Minute); err != nil {
			return 0, fmt.Errorf("waiting for ctxd to apply %d: %w", got, err)
		}
		last, start = got, end
	}
	return last, nil
}

// percentile returns the q-quantile (0 < q < 1) of sorted values, by
// nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
