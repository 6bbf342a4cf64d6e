package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/perf"
)

const soakAbout = `Runs ctxd serve as a process of its own, with its embedded NATS server
in a temporary directory, and drives it as long browsing sessions do:
--agents agents in a closed loop over --sessions sessions, each turn a
tool call and its result published (each PubAck awaited), then the
session's context fetched as msgpack at the last PubAck; every
--screenshot-every-th result is a browser result with a screenshot. With
--delta an agent keeps each session's last reply and asks against it
(have_seq, have_digest): ctxd sends the messages after those the agent
holds, and the agent puts the whole reply back together, as the Go and
TypeScript clients do; without it every reply is asked for whole. Every
--bare-every-th turn of an agent is followed by a bare one: the same
records published to another stream (kept to 64 MiB), then a
request-reply of the bytes ctxd sent to a responder that does nothing
else.

Every reply is checked: its seq at least min_seq and its message count
that of the agent's own projection of the records it published; every
--check-every-th reply of a session is compared with that projection
message by message. A reply that fails a check is an error.

It prints a row per --window: turns, errors, turn p50/p99 beside the bare
turn's, the median reply's size whole and as sent, the median bytes of
a turn's records and the ratio of the two, the process's RSS, its Go heap in use,
the projections' bytes (ctxd_sessions_loaded_bytes), the data directory's
size and the load average; then rows while the process idles for --idle.
Progress goes to standard error, the table to standard output.

It exits 1 when a target is missed: an error, a window whose turn p50 is
more than --max-ratio times the bare one's, a window whose bytes sent a
turn are more than --max-sent times its records' (deltas only), or an
RSS over the bound
(--cache-bytes and what ctxd serve's memory limit adds to it; see
docs/OPERATING.md, "Memory").

Flags after -- go to ctxd serve, e.g. -- --cpuprofile /tmp/serve.prof.`

func runSoak(ctx context.Context, e *env, args []string) error {
	cfg := perf.DefaultSoak()
	fs := newFlags(e, "soak", "soak [flags] [-- serve flags]", soakAbout)
	fs.IntVar(&cfg.Sessions, "sessions", cfg.Sessions, "sessions the agents take turns on")
	fs.IntVar(&cfg.Agents, "agents", cfg.Agents, "agents, each in a closed loop (publish a turn, fetch it)")
	fs.IntVar(&cfg.ScreenshotEvery, "screenshot-every", cfg.ScreenshotEvery, "every so many tool results is a browser screenshot (0: none)")
	fs.IntVar(&cfg.ScreenshotBytes, "screenshot-bytes", cfg.ScreenshotBytes, "base64 `BYTES` of a screenshot (100000: a 75 KB PNG)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the load runs")
	fs.IntVar(&cfg.Turns, "turns", 0, "end the load once every agent made this many turns instead of after --duration (0: --duration)")
	fs.DurationVar(&cfg.Window, "window", cfg.Window, "the period a row of the table covers")
	fs.DurationVar(&cfg.Idle, "idle", cfg.Idle, "how long the process is watched, idle, after the load (0: not)")
	fs.IntVar(&cfg.CheckEvery, "check-every", cfg.CheckEvery, "compare every so many replies of a session with the agent's projection message by message (1: every one)")
	fs.IntVar(&cfg.BareEvery, "bare-every", cfg.BareEvery, "follow every so many turns of an agent by a bare turn (1: every one)")
	fs.Float64Var(&cfg.MaxRatio, "max-ratio", cfg.MaxRatio, "largest turn p50 / bare turn p50 of a window (0: not judged)")
	fs.BoolVar(&cfg.Delta, "delta", false, "ask against each session's last reply (have_seq, have_digest) and put the delta back together, as the Go and TypeScript clients do (default: every reply whole)")
	fs.Float64Var(&cfg.MaxSent, "max-sent", cfg.MaxSent, "largest median bytes sent a turn / median bytes of a turn's records, of a window, with deltas (0: not judged)")
	cacheBytes := fs.Int64("cache-bytes", app.DefaultConfig().CacheBytes, "ctxd serve --cache-bytes; with the memory limit's overhead it makes the RSS bound")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the process's data and log (default: a temporary directory, removed afterwards)")
	var serveArgs []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, serveArgs = args[:i], args[i+1:]
	}
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(e, "soak", pos); err != nil {
		return err
	}
	switch {
	case cfg.Sessions < 1 || cfg.Agents < 1:
		return usageError(e, "soak", fmt.Errorf("--sessions and --agents: want at least 1, got %d and %d", cfg.Sessions, cfg.Agents))
	case cfg.Duration <= 0 && cfg.Turns <= 0:
		return usageError(e, "soak", fmt.Errorf("--duration: want a positive duration such as 5m, or --turns, got %s", cfg.Duration))
	case cfg.Window <= 0:
		return usageError(e, "soak", fmt.Errorf("--window: want a positive duration such as 30s, got %s", cfg.Window))
	case cfg.ScreenshotEvery < 0 || cfg.ScreenshotBytes < 0 || cfg.Turns < 0 || cfg.Idle < 0 || cfg.MaxRatio < 0 || cfg.MaxSent < 0:
		return usageError(e, "soak", errors.New("--screenshot-every, --screenshot-bytes, --turns, --idle, --max-ratio and --max-sent: want 0 or more"))
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Command = append([]string{bin, "serve", "--cache-bytes", strconv.FormatInt(*cacheBytes, 10)}, serveArgs...)
	cfg.RSSBound = memoryBound(*cacheBytes, true)
	if v := e.getenv("GOMEMLIMIT"); v != "" {
		cfg.Env = append(cfg.Env, "GOMEMLIMIT="+v)
	}
	cfg.Progress = e.stderr
	start := time.Now()
	rep, err := perf.Soak(ctx, cfg)
	if rep != nil {
		fmt.Fprintf(e.stderr, "soak done in %v\n", time.Since(start).Round(time.Second))
		if werr := rep.WriteTable(e.stdout); werr != nil {
			return werr
		}
	}
	if err != nil {
		return err
	}
	if missed := rep.Missed(); len(missed) > 0 {
		return &exitError{code: exitFailure, err: fmt.Errorf("%d targets missed: %s", len(missed), strings.Join(missed, "; "))}
	}
	return nil
}
