package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/rebuild"
)

const rebuildAbout = `Rebuilds session projections from the TRANSCRIPTS stream: every session,
one session (--session), or the sessions with records at or after a stream
sequence (--from). It shows progress (a bar on a terminal, a line every few
seconds otherwise).

Without --check it writes each session's checkpoint (the sequence of its
latest valid compaction and of its last record), from which a running ctxd
loads the session; working those out needs no projection, and only the
records that could be compactions are decoded.

With --check it writes nothing: it compares every rebuilt context with the
one the running service answers (reading on when the service has moved
past the rebuilt sequence, so records that keep arriving are fine), lists
each session that differs ("differs: S") and each it could not compare
("failed: S: why"), going on past both. It prints "no differences" when
all is well. Its exit code: 0 no differences, 1 differences found, 3 could
not run or could not compare every session (and none differs), 2 a bad
command line.

A --session with no records writes no checkpoint.

Give --browser-tools, --max-record-bytes and --max-session-bytes the values
the service runs with: they decide which records a session holds and which
compaction it restarts from, so with others the rebuild disagrees with the
service.`

// exitCheckFailed is rebuild --check's exit code when it could not run, or
// could not compare every session: 1 means differences found.
const exitCheckFailed = 3

func runRebuild(ctx context.Context, e *env, args []string) error {
	checking := false
	err := rebuildRun(ctx, e, args, &checking)
	var xe *exitError
	if err != nil && checking && !errors.As(err, &xe) && !errors.Is(err, errUsage) && !errors.Is(err, flag.ErrHelp) {
		return &exitError{code: exitCheckFailed, err: err}
	}
	return err
}

func rebuildRun(ctx context.Context, e *env, args []string, checking *bool) error {
	fs := newFlags(e, "rebuild", "rebuild [flags]", rebuildAbout)
	conn := addConnFlags(fs, e, true)
	session := fs.String("session", "", "rebuild only this session")
	from := fs.Uint64("from", 1, "rebuild the sessions that have records at or after this stream sequence")
	check := fs.Bool("check", false, "compare with the running service instead of writing checkpoints")
	browser, lim := addServiceFlags(fs)
	timeout := addTimeout(fs, time.Hour)
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := e.bound(fs.Name(), "--timeout", *timeout); err != nil {
		return err
	}
	*checking = *check
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "ctxd rebuild: takes no arguments, got %q\n", pos)
		return errUsage
	}
	if *session != "" {
		if err := checkSession(e, fs.Name(), *session); err != nil {
			return err
		}
	}
	nc, stream, err := conn.connectStream(e, fs)
	if err != nil {
		return err
	}
	defer nc.Close()

	rb, err := rebuild.Open(ctx, rebuild.Config{
		Conn:     nc,
		Stream:   stream,
		Options:  projection.Options{BrowserTools: splitList(*browser)},
		Limits:   *lim,
		Session:  *session,
		From:     *from,
		Check:    *check,
		Progress: &rebuildProgress{w: e.stderr},
	})
	if err != nil {
		return err
	}
	read, err := rb.Read(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "rebuilt %d sessions from %d records in %s (%.0f records/s)\n",
		read.Sessions, read.Records, read.Took.Round(time.Millisecond), float64(read.Records)/max(read.Took.Seconds(), 1e-9))
	if *session != "" && read.Records == 0 {
		fmt.Fprintf(e.stderr, "session %s has no records in the stream\n", *session)
	}
	if !*check {
		n, err := rb.WriteCheckpoints(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %d checkpoints\n", n)
		return nil
	}
	res, err := rb.Check(ctx)
	for _, id := range res.Differ {
		fmt.Fprintf(e.stdout, "differs: %s\n", id)
	}
	for _, f := range res.Failed {
		fmt.Fprintf(e.stdout, "failed: %s: %v\n", f.Session, f.Err)
	}
	switch {
	case err != nil:
		return err
	case len(res.Differ) > 0 && len(res.Failed) > 0:
		return &exitError{code: exitFailure, err: fmt.Errorf("%d of %d sessions differ from the running service, and %d could not be compared", len(res.Differ), res.Sessions, len(res.Failed))}
	case len(res.Differ) > 0:
		return &exitError{code: exitFailure, err: fmt.Errorf("%d of %d sessions differ from the running service", len(res.Differ), res.Sessions)}
	case len(res.Failed) > 0:
		return fmt.Errorf("%d of %d sessions could not be compared with the running service", len(res.Failed), res.Sessions)
	}
	fmt.Fprintf(e.stdout, "no differences (%d sessions)\n", res.Sessions)
	return nil
}

// rebuildProgress shows each pass of a rebuild with a progress.
type rebuildProgress struct {
	w io.Writer
	p *progress
}

func (r *rebuildProgress) Start(total uint64, unit string) {
	r.p = newProgress(r.w, "rebuild", total)
	r.p.unit = unit
}
func (r *rebuildProgress) Update(done uint64) { r.p.update(done) }
func (r *rebuildProgress) Finish(done uint64) { r.p.finish(done) }
