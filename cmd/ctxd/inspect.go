package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/inspect"
	"github.com/ctxd/ctxd/pkg/projection"
)

const inspectAbout = `Shows what the model saw of SESSION: each stored record (stream
sequence, class, size) beside the context messages it gives, marked kept,
converted, pruned (unpaired calls or orphan blocks removed), trimmed
(earlier screenshots omitted), checkpoint, replaced (by a later
compaction), dropped, rejected or quarantined, with the rule of
docs/CONTEXT.md that decided it; then the dropped report.

It reads the TRANSCRIPTS stream directly and needs no running service: the
context shown is projection.Build of the records, exactly what the service
answers when given the same --browser-tools, --max-record-bytes and
--max-session-bytes. With --at SEQ it shows the session as it was at that
stream sequence. With --json it prints one JSON object for scripts:
  {"session", "seq", "summary", "records": [{"seq", "class", "status",
   "rule", "messages", "size", "first_message", ...}], "messages": [...],
   "dropped": {...}}`

func runInspect(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "inspect", "inspect SESSION [flags]", inspectAbout)
	conn := addConnFlags(fs, e, true)
	at := fs.Uint64("at", 0, "show the session as it was at this stream sequence (0: latest)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	browser, lim := addServiceFlags(fs)
	timeout := addTimeout(fs, 2*time.Minute)
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if err := e.bound("inspect", "--timeout", *timeout); err != nil {
		return err
	}
	if len(pos) != 1 {
		fmt.Fprintln(e.stderr, "ctxd inspect: want exactly one SESSION")
		return errUsage
	}
	if err := checkSession(e, "inspect", pos[0]); err != nil {
		return err
	}
	nc, stream, err := conn.connectStream(e, fs)
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := bus.OpenStream(ctx, nc, stream); err != nil {
		return err
	}
	cfg := inspect.Config{Options: projection.Options{BrowserTools: splitList(*browser)}, Limits: *lim}
	v, err := inspect.Load(ctx, app.StreamReader{NC: nc, Stream: stream}, pos[0], *at, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		out, err := v.MarshalJSON()
		if err != nil {
			return err
		}
		return e.writeJSON(out)
	}
	return inspect.WriteText(e.stdout, v)
}
