// Command ctxd turns agent transcripts into model-ready context.
//
// Records are published to the JetStream subjects transcripts.<session>;
// ctxd keeps each session's projection live and answers requests on
// ctxd.context.<session>. Run `ctxd help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
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
		{"rebuild", "rebuild projections from the stream; --check compares them with the service", runRebuild},
		{"replay", "the same as rebuild", runRebuild},
		{"build", "print the model context of records read from a file or standard input (no NATS)", runBuild},
		{"bench", "measure ctxd against raw NATS and rebuild-per-turn; print each figure beside its baseline", runBench},
	}
}

// errUsage marks an error in the command line: exit code 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process exit code.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) > 1 {
			if c := find(args[1]); c != nil {
				return run(ctx, e, []string{c.name, "--help"})
			}
		}
		usage(e.stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c := find(args[0])
	if c == nil {
		fmt.Fprintf(e.stderr, "ctxd: unknown command %q\n\n", args[0])
		usage(e.stderr)
		return 2
	}
	err := c.run(ctx, e, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(e.stderr, "ctxd %s: %v\n", c.name, err)
	return 1
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
	fmt.Fprintf(w, "\nRun `ctxd <command> --help` for a command's flags.\n")
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
			fmt.Fprintf(fs.Output(), "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses a command's flags, which may come before or after its
// arguments, and returns the arguments; a bad command line is errUsage.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
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

// natsURL is the default server URL: $NATS_URL, else the local default.
func natsURL(e *env) string {
	if u := e.getenv("NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}
