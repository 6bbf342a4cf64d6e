package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/pkg/perf"
)

const benchAbout = `Measures ctxd against what it is built on and prints one table: each
figure beside its baseline from the same run, the ratio ctxd / baseline,
the target and whether it is met. Progress goes to standard error, the
table to standard output. See docs/PERFORMANCE.md.

It starts an embedded NATS server in a temporary directory, on a free port,
unless --nats names a server; that server must hold none of the streams the
bench creates and deletes (TRANSCRIPTS, KV_CTXD_CHECKPOINTS, KV_CTXD_SNAPSHOTS, PERF_RAW,
PERF_BARE, PERF_ORDERED, PERF_AGAIN), so never point it at a server a ctxd uses.

Without --quick the sizes are the full run's (several minutes, a few GB of
disk in the temporary directory); --quick takes about a minute. The size
flags override either; their defaults below are the full run's. The quick
run: --rounds 2 --ingest-rounds 3 --ingest-records 20000
--fetch-samples 1000 --clients-time 1s --turn-samples 50 --rebuild-records 20000
--rebuild-sessions 100 --cold-records 20000 --cold-samples 500
--memory-sessions 100.

It exits 1 when a figure misses its target (a row marked NO), after the
table, naming the figures; a figure it could not measure (marked
unmeasured, with a warning under the table) is one.`

// benchOptions are the flags of ctxd bench that are not sizes.
type benchOptions struct {
	quick      *bool
	figures    *string
	cpuprofile *string
}

// benchFlags registers the flags of ctxd bench, the sizes bound to cfg.
func benchFlags(e *env, cfg *perf.Config) (*flag.FlagSet, benchOptions) {
	fs := newFlags(e, "bench", "bench [--quick] [flags]", benchAbout)
	var o benchOptions
	o.quick = fs.Bool("quick", false, "the quick sizes: about a minute")
	o.figures = fs.String("figures", "", "comma-separated figures to measure (default all): "+strings.Join(perf.Figures, ", "))
	o.cpuprofile = fs.String("cpuprofile", "", "write a CPU profile of the run (ctxd, the embedded server and the clients) to this file")
	fs.StringVar(&cfg.IngestProfiles, "ingest-cpuprofiles", "", "write a CPU profile of each side of each ingest round (ctxd-1.prof, ordered-1.prof, ordered-again-1.prof, raw-1.prof, bare-1.prof, ...) to this directory; not with --cpuprofile")
	fs.StringVar(&cfg.HeapProfile, "memprofile", "", "write a heap profile, taken while the memory figure's sessions are live, to this file")
	fs.StringVar(&cfg.NATSURL, "nats", "", "run against this NATS server instead of an embedded one (see above)")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the embedded server's files (default: a temporary directory, removed afterwards)")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds of the clients and rebuild comparisons; the median is reported")
	fs.IntVar(&cfg.IngestRounds, "ingest-rounds", cfg.IngestRounds, "rounds of the ingest figure, each side once a round; its ratio is the median of the rounds' ratios")
	fs.IntVar(&cfg.ScreenshotBytes, "screenshot-bytes", cfg.ScreenshotBytes, "base64 size of a browser screenshot (0: none)")
	fs.IntVar(&cfg.ScreenshotEvery, "screenshot-every", cfg.ScreenshotEvery, "messages (or records) between two browser screenshots")
	fs.IntVar(&cfg.IngestRecords, "ingest-records", cfg.IngestRecords, "records published per ingest round")
	fs.IntVar(&cfg.IngestSessions, "ingest-sessions", cfg.IngestSessions, "live sessions the ingest records go to")
	fs.Var((*intList)(&cfg.FetchMessages), "fetch-messages", "comma-separated session lengths of the fetch figure, in messages since the latest compaction")
	fs.IntVar(&cfg.FetchSamples, "fetch-samples", cfg.FetchSamples, "timed fetches of each session, and as many bare requests")
	fs.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent clients of the throughput figure")
	fs.IntVar(&cfg.ClientsMessages, "clients-messages", cfg.ClientsMessages, "session length the concurrent clients fetch")
	fs.DurationVar(&cfg.ClientsTime, "clients-time", cfg.ClientsTime, "how long the clients run per round, for ctxd and for bare each")
	fs.Var((*intList)(&cfg.TurnMessages), "turn-messages", "comma-separated session lengths at which a turn (publish, then fetch with min_seq) and a fetch with no new records are compared with rebuild-per-turn")
	fs.IntVar(&cfg.TurnSamples, "turn-samples", cfg.TurnSamples, "timed turns of each side, and as many fetches and rebuilds with no new records, per session length")
	fs.IntVar(&cfg.RebuildRecords, "rebuild-records", cfg.RebuildRecords, "records in the replayed stream")
	fs.IntVar(&cfg.RebuildSessions, "rebuild-sessions", cfg.RebuildSessions, "sessions the replayed stream's records are spread over")
	fs.IntVar(&cfg.ColdRecords, "cold-records", cfg.ColdRecords, "records in the stream cold loads read from")
	fs.IntVar(&cfg.ColdSessionRecords, "cold-session-records", cfg.ColdSessionRecords, "records of one session of the cold-load stream")
	fs.IntVar(&cfg.ColdSamples, "cold-samples", cfg.ColdSamples, "timed cold loads, and as many direct-get reads")
	fs.IntVar(&cfg.MemorySessions, "memory-sessions", cfg.MemorySessions, "sessions of the cold-load stream loaded for the memory figure")
	fs.DurationVar(&cfg.MemorySettle, "memory-settle", cfg.MemorySettle, "how long the memory figure waits with its sessions loaded before measuring, for the embedded server's caches to expire")
	return fs, o
}

func runBench(ctx context.Context, e *env, args []string) error {
	cfg := perf.Full()
	fs, o := benchFlags(e, &cfg)
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "ctxd bench: takes no arguments, got %q\n", pos)
		return errUsage
	}
	if *o.quick {
		// The same command line over the quick sizes: flags given still win.
		cfg = perf.Quick()
		fs, o = benchFlags(e, &cfg)
		if _, err := parse(e, fs, args); err != nil {
			return err
		}
	}
	if *o.figures != "" {
		cfg.Figures = strings.Split(*o.figures, ",")
	}
	if err := cfg.Check(); err != nil {
		fmt.Fprintf(e.stderr, "ctxd bench: %v\n", err)
		return errUsage
	}
	cfg.Progress = e.stderr
	if *o.cpuprofile != "" && cfg.IngestProfiles != "" {
		fmt.Fprintln(e.stderr, "ctxd bench: --cpuprofile and --ingest-cpuprofiles exclude each other: one CPU profile runs at a time")
		return errUsage
	}
	if *o.cpuprofile != "" {
		f, err := os.Create(*o.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	rep, err := perf.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "bench done in %v\n", time.Since(start).Round(time.Second))
	if err := rep.WriteTable(e.stdout); err != nil {
		return err
	}
	if missed := rep.Missed(); len(missed) > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%d of %d targets missed: %s", len(missed), rep.Targets(), strings.Join(missed, "; "))}
	}
	return nil
}

// intList is a flag of comma-separated integers.
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not an integer", f)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}
