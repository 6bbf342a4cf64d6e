// Command ctxd turns agent transcripts into model-ready context.
//
// Records are published to the JetStream subjects transcripts.<session>;
// ctxd keeps each session's projection live and answers requests on
// ctxd.context.<session>. Run `ctxd help` for the commands.
//
// A file per subcommand (serve.go, build.go, buildformat.go, client.go for
// publish and context, inspect.go, rebuild.go, partition.go, bench.go,
// soak.go, version.go), import.go's own parts beside it:
//
//	import.go         ctxd import: files converted, --follow
//	importpublish.go  the converted records published, what the session holds read
//	importencode.go   the records' JSON made ahead of their publish
//	importorder.go    a file's records checked against those the session stores
//
// and what the commands share: main.go (the commands, the config file),
// conn.go (connecting to NATS), follow.go (files followed as they grow),
// progress.go, memory.go, notify.go (systemd), jsonutil.go, mmap_*.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/render"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// command is one subcommand: its name, a one-line summary, and its run
// function, which parses its own flags.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a command may touch of the process, so tests can run
// commands in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// abort ends the command's context with the error that ends the
	// command (a permissions violation on one of its connections).
	abort context.CancelCauseFunc
	// terminal tells whether a writer is a terminal (nil: isTerminal).
	terminal func(io.Writer) bool
	// stopTimeout stops the timer of the command's --timeout.
	stopTimeout func() bool
}

// timeoutError ends a command that took longer than its --timeout.
type timeoutError struct {
	flag string
	d    time.Duration
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("not done within %s %s: stopped", e.flag, e.d)
}

func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }

// addTimeout adds --timeout to a command's flags: how long it may take
// at most, what by default.
func addTimeout(fs *flag.FlagSet, def time.Duration) *time.Duration {
	return fs.Duration("timeout", def, "how long the command may take at most; past it, it stops and fails (0: no bound)")
}

// addServiceFlags adds the flags of a command that builds contexts
// outside the service, and agrees with it only when given its values:
// --browser-tools, --max-record-bytes and --max-session-bytes.
func addServiceFlags(fs *flag.FlagSet) (browser *string, lim *store.Limits) {
	browser = fs.String("browser-tools", "browser_use", "comma-separated tool names whose screenshots are trimmed (as the service is configured)")
	l := store.DefaultLimits()
	fs.IntVar(&l.MaxRecordBytes, "max-record-bytes", l.MaxRecordBytes, "largest record decoded, as the service is configured")
	fs.Int64Var(&l.MaxSessionBytes, "max-session-bytes", l.MaxSessionBytes, "bytes of records one session may hold since its latest compaction, as the service is configured")
	return browser, &l
}

// bound ends the command with a timeoutError once d has passed (0: no
// bound); a negative d is a usage error.
func (e *env) bound(name, flagName string, d time.Duration) error {
	if d < 0 {
		fmt.Fprintf(e.stderr, "ctxd %s: %s: want 0 (no bound) or a positive duration such as 30s, got %s\n", name, flagName, d)
		return errUsage
	}
	if d > 0 && e.abort != nil {
		abort := e.abort
		t := time.AfterFunc(d, func() { abort(&timeoutError{flag: flagName, d: d}) })
		e.stopTimeout = t.Stop
	}
	return nil
}

var commands []command

func init() {
	commands = []command{
		{"serve", "run the service: ingest transcripts and answer context requests", runServe},
		{"publish", "publish JSON-lines records to a session's transcript", runPublish},
		{"import", "convert transcripts of Claude Code, Codex, pi, Gemini CLI or OpenHands and publish them", runImport},
		{"context", "print a session's context reply as JSON", runContext},
		{"rejected", "list the records the projections skipped", runRejected},
		{"inspect", "show a session's records beside its context, and what the rules did to each", runInspect},
		{"partition", "spread an existing TRANSCRIPTS stream's sessions over partitions, keeping every record and sequence", runPartition},
		{"rebuild", "rebuild projections from the stream; --check compares them with the service", runRebuild},
		{"replay", "the same as rebuild", runRebuild},
		{"build", "print the model context of records read from a file or standard input (no NATS)", runBuild},
		{"bench", "measure ctxd against raw NATS and rebuild-per-turn; print each figure beside its baseline", runBench},
		{"soak", "run ctxd serve under long browsing sessions for a while; print turns, latency beside bare NATS, and memory per window", runSoak},
		{"version", "print the version of ctxd", runVersion},
	}
}

// errUsage marks an error in the command line: exit code 2.
var errUsage = errors.New("usage")

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // 128 + SIGINT, as shells report it
)

// exitError is an error with an exit code of its own.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit code.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		if len(args) > 1 {
			if c := find(args[1]); c != nil {
				return run(ctx, e, []string{c.name, "--help"})
			}
			fmt.Fprintf(e.stderr, "ctxd: unknown command %q\n\n", args[1])
			usage(e.stderr)
			return exitUsage
		}
		usage(e.stdout)
		return exitOK
	case "--version", "-version", "-v":
		args = append([]string{"version"}, args[1:]...)
	}
	c := find(args[0])
	if c == nil {
		fmt.Fprintf(e.stderr, "ctxd: unknown command %q\n\n", args[0])
		usage(e.stderr)
		return exitUsage
	}
	cmdCtx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	e.abort = abort
	err := c.run(cmdCtx, e, args[1:])
	if e.stopTimeout != nil {
		e.stopTimeout()
	}
	var pe *PermissionError
	var te *timeoutError
	cause := context.Cause(cmdCtx)
	if err != nil && (errors.As(cause, &pe) || errors.As(cause, &te)) && !errors.Is(err, client.ErrInboxRefused) {
		// What the command saw is its context's end, or a request
		// without answer: the cause is the server's refusal, or the
		// command's bound.
		err = cause
	}
	var xe *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	case ctx.Err() != nil:
		fmt.Fprintf(e.stderr, "ctxd %s: interrupted\n", c.name)
		return exitInterrupted
	case errors.As(err, &xe):
		fmt.Fprintf(e.stderr, "ctxd %s: %v\n", c.name, err)
		return xe.code
	}
	fmt.Fprintf(e.stderr, "ctxd %s: %v\n", c.name, err)
	return exitFailure
}

func find(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "ctxd turns agent transcripts into model-ready context.\n\nUsage:\n  ctxd <command> [flags] [arguments]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun `ctxd <command> --help` for a command's flags; `ctxd --version` for the version.\n")
	fmt.Fprintf(w, "Exit codes: 0 ok, 1 failure, 2 usage error (a bad flag, argument or value), 130 interrupted (rebuild --check: see its help).\n")
}

// newFlags returns a flag set for a command whose parse errors and help
// go to the command's standard error.
func newFlags(e *env, name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ctxd %s\n\n%s\n", synopsis, about)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			example := "nats"
			fs.VisitAll(func(f *flag.Flag) {
				if example == "nats" && strings.Contains(f.Name, "-") {
					example = f.Name
				}
			})
			fmt.Fprintf(fs.Output(), "\nFlags (each also settable as CTXD_<FLAG>, e.g. --%s as %s):\n", example, envName(example))
			printDefaults(fs)
		}
	}
	return fs
}

// printDefaults prints the flags in the --flag form, each with its value's
// name (a backquoted word of its usage, else its type) and default.
func printDefaults(fs *flag.FlagSet) {
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if d := f.DefValue; d != "" && d != "0" && d != "false" && !secretFlags[f.Name] {
			if f.Name == "nats" {
				d = app.Redact(d) // from NATS_URL or CTXD_NATS
			}
			fmt.Fprintf(w, " (default %s)", d)
		}
		fmt.Fprintln(w)
	})
}

// secretFlags are never printed, not even as a default from CTXD_<FLAG>.
var secretFlags = map[string]bool{"password": true, "token": true, "http-token": true}

// noArgs refuses arguments to a command that takes none.
func noArgs(e *env, name string, pos []string) error {
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "ctxd %s: takes no arguments, got %q\n", name, pos)
		return errUsage
	}
	return nil
}

// parse parses a command's flags, which may come before or after its
// arguments, and returns the arguments; a bad command line is errUsage.
// A flag not on the command line is taken from CTXD_<FLAG> first.
func parse(e *env, fs *flag.FlagSet, args []string) ([]string, error) {
	if err := envDefaults(fs, e); err != nil {
		fmt.Fprintf(e.stderr, "ctxd %s: %v\n", fs.Name(), err)
		return nil, errUsage
	}
	// The flag package prints its errors with -flag and the whole help
	// after them: one line with --flag instead, and where the help is.
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(e.stderr) }()
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(e.stderr)
				usage()
				return nil, err
			}
			fmt.Fprintf(e.stderr, "ctxd %s: %s\nRun `ctxd %s --help` for its flags.\n", fs.Name(), singleDash.ReplaceAllString(err.Error(), "$1--$2"), fs.Name())
			return nil, errUsage
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// singleDash is a flag named as the flag package names it, -flag.
var singleDash = regexp.MustCompile(`(^|\s)-([A-Za-z0-9][\w-]*)`)

// checkSession refuses a session id no subject can carry: a usage error.
func checkSession(e *env, name, id string) error {
	if err := subject.CheckSession(id); err != nil {
		fmt.Fprintf(e.stderr, "ctxd %s: %v\n", name, err)
		return errUsage
	}
	return nil
}

// checkFormat refuses a --format no renderer has: a usage error.
func checkFormat(e *env, name, format string) (render.Format, error) {
	f, err := render.ParseFormat(format)
	if err != nil {
		fmt.Fprintf(e.stderr, "ctxd %s: --format: %v\n", name, err)
		return "", errUsage
	}
	return f, nil
}
