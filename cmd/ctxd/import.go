package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/importer"
)

const importAbout = `Converts transcripts written by agent tools into ctxd records and publishes
them to transcripts.SESSION. FORMAT is claude-code, codex, pi, gemini,
openhands (a conversation directory), or auto, which tells the format from
the content and says what it chose. FILE "-" is standard input.

The session is the one the file names (its own session id made valid; a
subagent's is SESSION_agent-ID), or --session. Every record carries a
Nats-Msg-Id derived from the source's ids, and records already in the
session's stream are skipped: importing a file twice, or a file that grew
since, stores each record once. They must be the file's first records, in
its order: a session that lacks one before records it holds (a stream
limit deleted it, or an import failed to store it) is refused, since what
is missing could no longer be stored in order. An import stops at the
first record not stored, and says whether records after it were.

With --print the records are written to standard output as JSON lines and
nothing is published:
  ctxd import --from pi --print FILE | ctxd build --dropped

A summary of each file goes to standard error: records by class, entries
skipped as metadata, entries not understood (with their line), and what was
approximated. Without --print, standard output gets one line per session:
SESSION and the stream sequence of its last record.

Invalid UTF-8 inside a string is replaced with U+FFFD and listed as
approximated, with its line. A line that does not decode otherwise (not
JSON, nested too deep, cut short) fails its file, naming the line: entries
hang off each other, and leaving one out could leave out the conversation
before it. So does a line longer than --max-line, as soon as it is read,
whatever the input (a device, a pipe), and a file larger than --max-file
(each file is read whole before it is converted): an import's memory is
bounded whatever it is given.

A record larger than the server accepts (its max_payload, or the stream's
largest message) is never cut: its session is not published at all, the
error names the file, line and size, and the file's other sessions and the
other files go on. Raise the server's max_payload and import again.

A large file is read on all processors; its records are published once
it is read whole, since which entries are on a transcript's active branch
is known only at its end. The next file is read while one is published.

With --follow the import keeps going: every 300 ms it looks at the size,
modification time and identity of each FILE, and of each .jsonl and .json
file under a directory FILE (Claude Code's project folder, Codex's
sessions, Gemini CLI's chats, pi's sessions), and publishes what a file
that changed adds, complete lines only. It resumes after a restart without
sending anything twice; a file cut shorter or replaced is read again from
its start; a new file is a new session. A tool that rewinds past records
already published (it goes on from an earlier point) gets a compaction of
the branch it goes on from, so the context follows the tool and the stream
keeps every record. Gemini CLI's last model message, which the tool
writes again as its calls and results come, is held back until the tool
writes the next message, or the follow stops. --timeout bounds each
publish, not the run; Ctrl-C stops (exit 0). Not for --print, standard
input or OpenHands.
  ctxd import --follow --from claude-code ~/.claude/projects/-home-me-repo`

func runImport(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "import", "import --from FORMAT [flags] FILE...", importAbout)
	conn := addConnFlags(fs, e, true)
	from := fs.String("from", "", "the transcripts' format: claude-code, codex, pi, gemini, openhands or auto (required)")
	session := fs.String("session", "", "publish to this session instead of the one the file names")
	printOnly := fs.Bool("print", false, "write the records to standard output as JSON lines; publish nothing")
	maxLine := fs.Int("max-line", importer.DefaultMaxLine, "the longest line of a file read, in `BYTES`: a longer one fails its file")
	maxFile := fs.Int64("max-file", importer.DefaultMaxFile, "the largest file read, in `BYTES`: a file is read whole before it is converted, so this bounds the memory an import takes; a larger one fails")
	follow := fs.Bool("follow", false, "keep following the files, and the transcripts under directories, publishing each record as the tool writes it, until interrupted; --timeout then bounds each publish")
	timeout := addTimeout(fs, 30*time.Minute)
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if *follow {
		if *timeout < 0 {
			fmt.Fprintf(e.stderr, "ctxd import: --timeout: want 0 (no bound) or a positive duration such as 30s, got %s\n", *timeout)
			return errUsage
		}
	} else if err := e.bound("import", "--timeout", *timeout); err != nil {
		return err
	}
	if *from == "" {
		fmt.Fprintln(e.stderr, "ctxd import: --from is required")
		return errUsage
	}
	format, err := importer.ParseFormat(*from)
	if err != nil {
		fmt.Fprintf(e.stderr, "ctxd import: --from: %v\n", err)
		return errUsage
	}
	if len(pos) == 0 {
		fmt.Fprintln(e.stderr, "ctxd import: want at least one FILE")
		return errUsage
	}
	if *session != "" {
		if err := checkSession(e, "import", *session); err != nil {
			return err
		}
	}
	if *maxLine < 1 {
		fmt.Fprintf(e.stderr, "ctxd import: --max-line: %d: want 1 or more bytes\n", *maxLine)
		return errUsage
	}
	if *maxFile < 1 {
		fmt.Fprintf(e.stderr, "ctxd import: --max-file: %d: want 1 or more bytes\n", *maxFile)
		return errUsage
	}
	parser := importer.Parser{MaxLine: *maxLine, MaxFile: *maxFile}
	if *follow {
		if err := checkFollow(e, format, *printOnly, *session, pos); err != nil {
			return err
		}
	}

	if e.getenv("GOGC") == "" {
		// A conversion's heap grows to hold every entry of the file before
		// the first record is published: at the default, the collector
		// traces it again at every doubling, about a quarter of the
		// import's processor time for a 100 MB file. Let it grow four
		// times over between collections instead: more memory, for the
		// time of the command.
		defer debug.SetGCPercent(debug.SetGCPercent(importGCPercent))
	}
	var pub *importPublisher
	if !*printOnly {
		var extra []nats.Option
		if *follow {
			extra = followConnOptions(e)
		}
		nc, err := conn.connect(e, fs, extra...)
		if err != nil {
			return err
		}
		defer nc.Close()
		pub = &importPublisher{nc: nc, e: e, ready: make(chan struct{})}
		if *follow {
			return followFiles(ctx, e, pub, &follower{
				e: e, pub: pub, parser: parser, format: format, session: *session,
				batch: *timeout, interval: followInterval, paths: pos,
				out: bufio.NewWriter(e.stdout), files: map[string]*followedFile{},
			})
		}
		// Find the stream while the first file is read and converted.
		go pub.findStream(ctx)
		defer func() { <-pub.ready }()
	}
	out := bufio.NewWriterSize(e.stdout, 1<<16)
	failed := 0
	// The next file is read and converted while one is published.
	files, stop := convertAhead(ctx, e, parser, format, pos)
	defer stop()
	for _, name := range pos {
		c, ok := <-files
		if !ok {
			return ctx.Err()
		}
		err := c.err
		if err == nil {
			err = importFile(ctx, e, out, pub, format, *session, name, c.ts)
			c.release()
		}
		if err != nil {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return err // interrupted, or refused by the server: no file more
			}
			if errors.Is(err, importer.ErrLineTooLong) {
				err = fmt.Errorf("%w (--max-line)", err)
			}
			if errors.Is(err, importer.ErrFileTooLarge) {
				err = fmt.Errorf("%w (--max-file)", err)
			}
			fmt.Fprintf(e.stderr, "ctxd import: %v\n", err)
			failed++
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d files not imported", failed, len(pos))
	}
	return nil
}

// checkFollow checks what --follow is given: files and directories that
// exist, no standard input, a single file for --session.
func checkFollow(e *env, format importer.Format, printOnly bool, session string, paths []string) error {
	usage := func(format string, a ...any) error {
		fmt.Fprintf(e.stderr, "ctxd import: --follow: "+format+"\n", a...)
		return errUsage
	}
	if printOnly {
		return usage("publishes: not with --print")
	}
	if format == importer.OpenHands {
		return usage("an OpenHands conversation is a directory of events: import it when it is finished")
	}
	for _, p := range paths {
		if p == "-" {
			return usage("follows files and directories, not standard input")
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if session != "" && (st.IsDir() || len(paths) > 1) {
			return usage("--session names the session of one file: give one file, or no --session")
		}
	}
	return nil
}

// followFiles finds the stream, within the follower's batch bound, then
// follows until ctx ends. Interrupted before the stream is found, it
// returns ctx's error; after, a stop is the normal end.
func followFiles(ctx context.Context, e *env, pub *importPublisher, f *follower) error {
	fctx, cancel := ctx, context.CancelFunc(func() {})
	if f.batch > 0 {
		fctx, cancel = context.WithTimeout(ctx, f.batch)
	}
	pub.findStream(fctx)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if pub.err != nil {
		return pub.err
	}
	return f.run(ctx)
}

// converted is a file read and converted, or why not; release once ts is
// no longer used.
type converted struct {
	ts      []*importer.Transcript
	release func()
	err     error
}

// convertAhead reads and converts the files in order, on a goroutine that
// keeps at most one file converted ahead of the one the caller takes from
// the channel, which is closed after the last file or once ctx ends. stop
// ends it, releases what was not taken and waits for it.
func convertAhead(ctx context.Context, e *env, p importer.Parser, format importer.Format, names []string) (<-chan converted, func()) {
	ctx, cancel := context.WithCancel(ctx)
	files := make(chan converted)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(files)
		for _, name := range names {
			var c converted
			c.ts, c.release, c.err = convertFile(e, p, format, name)
			select {
			case files <- c:
			case <-ctx.Done():
				c.release()
				return
			}
		}
	}()
	return files, func() {
		cancel()
		for c := range files {
			c.release()
		}
		<-done
	}
}

// importFile prints or publishes the sessions converted from a file.
func importFile(ctx context.Context, e *env, out *bufio.Writer, pub *importPublisher, format importer.Format, session, name string, ts []*importer.Transcript) error {
	var errs []error
	for i, t := range ts {
		sess := t.Session
		if session != "" {
			sess = session
			if i > 0 {
				sess = importer.AgentSession(session, t.Agent)
			}
		}
		detected := ""
		if format == importer.Auto {
			detected = " (detected)"
		}
		head := fmt.Sprintf("%s: %s%s, session %s", name, t.Format, detected, sess)
		if pub == nil {
			for _, r := range t.Records {
				b, err := r.JSON()
				if err != nil {
					return fmt.Errorf("%s: %s: encode record: %w", name, r.Where, err)
				}
				out.Write(b)
				out.WriteByte('\n')
			}
			fmt.Fprintf(e.stderr, "%s: %d records printed\n%s", head, len(t.Records), t.Report.Summary("  "))
			continue
		}
		res, err := pub.publish(ctx, t, sess, false)
		if err != nil {
			fmt.Fprintf(e.stderr, "%s: not published\n%s", head, t.Report.Summary("  "))
			errs = append(errs, err)
			continue
		}
		dups := ""
		if res.duplicate > 0 {
			dups = fmt.Sprintf(", %d dropped by the server as duplicates", res.duplicate)
		}
		fmt.Fprintf(e.stderr, "%s: %d records, %d published, %d already in the stream%s, last sequence %d\n%s",
			head, len(t.Records), res.published, res.present, dups, res.last, t.Report.Summary("  "))
		if res.abandoned > 0 {
			// Records cannot be taken back: they stay in the context.
			if session == "" {
				fmt.Fprintf(e.stderr, "%s: warning: session %s holds %d records imported from this file that it no longer produces: a branch abandoned since they were imported; they stay in the session\n",
					name, sess, res.abandoned)
			} else {
				fmt.Fprintf(e.stderr, "%s: warning: session %s holds %d records imported from %s files that this file does not produce: another file's, or a branch abandoned since they were imported; they stay in the session\n",
					name, sess, res.abandoned, t.Format)
			}
		}
		fmt.Fprintf(out, "%s %d\n", sess, res.last)
	}
	return errors.Join(errs...)
}

// convertFile reads and converts a file, standard input ("-") or an
// OpenHands conversation directory. The transcripts may share the bytes of
// a large file, mapped into memory rather than copied: release, once they
// are no longer used.
func convertFile(e *env, p importer.Parser, format importer.Format, name string) (ts []*importer.Transcript, release func(), err error) {
	release = func() {}
	if name == "-" {
		ts, err = p.Parse(format, "stdin", e.stdin)
		return ts, release, err
	}
	st, err := os.Stat(name)
	if err != nil {
		return nil, release, err
	}
	if st.IsDir() {
		ts, err = p.ParseFS(format, os.DirFS(name), name)
		return ts, release, err
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, release, err
	}
	defer f.Close()
	if st.Mode().IsRegular() && st.Size() >= mapMinBytes {
		if data, unmap, err := mapFile(f, st.Size()); err == nil {
			if ts, err = p.ParseBytes(format, name, data); err != nil {
				unmap()
				return nil, release, err
			}
			return ts, unmap, nil
		}
	}
	ts, err = p.Parse(format, name, f)
	return ts, release, err
}

// mapMinBytes is the size from which a file is mapped into memory instead
// of read: reading copies it into fresh memory, which costs about a tenth
// of a second per 100 MB. Transcripts that large are logs that grow by
// appending; a file cut shorter while it is imported makes the import
// fail (SIGBUS).
const mapMinBytes = 16 << 20
