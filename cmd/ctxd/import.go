package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/importer"
	"github.com/ctxd/ctxd/pkg/subject"
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
keeps every record. --timeout bounds each publish, not the run; Ctrl-C
stops (exit 0). Not for --print, standard input or OpenHands.
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
		nc, err := conn.connect(e, fs)
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

// importPublisher publishes converted transcripts, a Nats-Msg-Id per
// record.
type importPublisher struct {
	nc *nats.Conn
	e  *env
	// The stream that stores transcripts.>, found once; ready is closed
	// when stream or err is set.
	ready  chan struct{}
	stream *bus.Stream
	err    error
}

// findStream looks up the stream that stores the transcripts.
func (p *importPublisher) findStream(ctx context.Context) {
	defer close(p.ready)
	if p.stream, p.err = bus.FindStream(ctx, p.nc, subject.TranscriptsPrefix+">"); p.err != nil {
		if ctx.Err() == nil {
			p.err = fmt.Errorf("%w (is ctxd serve running?)", p.err)
		}
		return
	}
	// The records already there are found through the layout: one that
	// misses some would publish them again.
	l, err := p.stream.Layout()
	if err == nil {
		err = bus.CheckLayout(ctx, p.nc, l)
	}
	if err != nil {
		p.stream, p.err = nil, err
	}
}

// importAckWait is how long the import waits for a record's
// acknowledgement; 0 for pkg/bus's default. Tests shorten it.
var importAckWait time.Duration

type importResult struct {
	published int  // stored by this import
	present   int  // found in the stream before publishing, not sent
	abandoned int  // in the stream, imported from the format, not produced by the file
	rewound   bool // a compaction of the file's branch was published before the rest
	duplicate int  // sent, and dropped by the server as duplicates
	last      uint64
}

// importMsgID is the Nats-Msg-Id of an imported record: the format, the
// session and the record's own ID, so the same source record imported into
// two sessions is two records.
func importMsgID(format importer.Format, session, id string) string {
	return "import:" + string(format) + ":" + session + ":" + id
}

// publish stores a transcript's records that the session's stream does not
// hold yet, in order.
//
// With rewind, records of the format the session holds after the ones of
// the file, and that the file no longer produces (a branch the tool
// abandoned), are followed by a compaction of the file's branch up to
// them before the rest is appended.
func (p *importPublisher) publish(ctx context.Context, t *importer.Transcript, session string, rewind bool) (importResult, error) {
	var res importResult
	subj, err := subject.Transcript(session)
	if err != nil {
		return res, err
	}
	select {
	case <-p.ready:
	case <-ctx.Done():
		return res, ctx.Err()
	}
	if p.err != nil {
		return res, fmt.Errorf("%s: %w", t.Name, p.err)
	}
	log, lastSeq, err := p.sessionLog(ctx, session)
	if err != nil {
		return res, fmt.Errorf("%s: %w", t.Name, err)
	}
	stream := log.Stream
	limit, maxMsg := p.nc.MaxPayload(), log.MaxMsgSize

	// Size everything first: a record too large fails the whole session,
	// before anything of it is published, so that its order is kept.
	ids := make([]string, len(t.Records))
	var tooBig []string
	for i := range t.Records {
		r := &t.Records[i] // Size keeps the encoding of a record kept as a value, for JSON
		n, err := r.Size()
		if err != nil {
			return res, fmt.Errorf("%s: %s: encode record: %w", t.Name, r.Where, err)
		}
		ids[i] = importMsgID(t.Format, session, r.ID)
		// Both limits count the headers.
		size := int64(n)
		withHeaders := size + int64(bus.AppendHeaderBytes(ids[i]))
		record := func(most int64) string {
			s := fmt.Sprintf("%s: %s: %s record of %d bytes", t.Name, r.Where, withArticle(r.Class()), size)
			if size <= most {
				s += fmt.Sprintf(", %d with its headers", withHeaders)
			}
			return s
		}
		if limit > 0 && withHeaders > limit {
			tooBig = append(tooBig, fmt.Sprintf("%s; the server accepts at most %d (its max_payload)", record(limit), limit))
		} else if maxMsg > 0 && withHeaders > maxMsg {
			tooBig = append(tooBig, fmt.Sprintf("%s; stream %s stores at most %d (its max_msg_size)", record(maxMsg), stream, maxMsg))
		}
	}
	if len(tooBig) > 0 {
		return res, fmt.Errorf("%s\nnothing of session %s was published: raise the limit and import again", strings.Join(tooBig, "\n"), session)
	}

	// The session must hold the file's first records, in the file's order
	// (records of other sources may come between them), and no other
	// record of the file: the rest is appended after them. A hole (a
	// record a stream limit deleted, or that an import failed to store
	// while records after it were stored) cannot be filled in the file's
	// order any more: refuse rather than append out of order.
	state, bad := storedState(log.IDs, ids, importMsgID(t.Format, session, ""))
	if bad != nil {
		return res, bad.describe(t, session)
	}
	done, abandoned := state.n, state.abandoned
	res.present, res.abandoned, res.last = done, abandoned, lastSeq
	todo := t.Records[done:]
	if rewind && (abandoned > 0 || state.context < done) {
		// The tool went on from an earlier point than the session's last
		// records: a compaction of the branch it continues, up to the
		// fork, comes before the rest, so that the context follows the
		// tool. The abandoned records stay in the stream.
		c, err := importer.Rewind(t, done, rewindID(done, lastSeq), abandoned)
		if err != nil {
			return res, fmt.Errorf("%s: rewind: %w", t.Name, err)
		}
		cid := importMsgID(t.Format, session, c.ID)
		n, err := c.Size()
		if err != nil {
			return res, fmt.Errorf("%s: %s: encode record: %w", t.Name, c.Where, err)
		}
		size := int64(n) + int64(bus.AppendHeaderBytes(cid))
		if (limit > 0 && size > limit) || (maxMsg > 0 && size > maxMsg) {
			return res, fmt.Errorf("%s: the compaction of %s is %d bytes with its headers, more than the server or stream %s accepts; nothing of session %s was published: raise the limit, or import the file into a new --session", t.Name, c.Where, size, stream, session)
		}
		todo = append([]importer.Record{c}, todo...)
		ids = append(ids[:done:done], append([]string{cid}, ids[done:]...)...)
		res.rewound, res.abandoned = true, 0
	}
	var prog *progress
	if pr := newProgress(p.e.stderr, "import "+t.Name, uint64(len(todo))); pr.tty && len(todo) > 0 {
		prog = pr
	}
	// The records' bytes are made ahead, on another processor, while the
	// publisher sends the ones before.
	enc := encodeAhead(ctx, todo, importAhead)
	defer enc.stop()
	// bus.Append stores the records right after the session's last one,
	// in the file's order, and stops at the first that fails; records
	// sent before the failure was known may be stored after it, leaving
	// the session without it: it says so, and importing again refuses
	// (above) rather than append it out of order.
	out, err := p.stream.Append(ctx, bus.AppendRecords{
		Subject: subj,
		After:   log.Last,
		N:       len(todo),
		Data:    enc.next,
		MsgID:   func(i int) string { return ids[done+i] },
		Progress: func(acked int) {
			if prog != nil {
				prog.update(uint64(acked))
			}
		},
		AckWait: importAckWait,
	})
	res.published, res.duplicate = out.Stored, out.Duplicate
	res.last = max(res.last, out.Last)
	if prog != nil {
		prog.finish(uint64(res.published + res.duplicate))
	}
	if re := (*bus.RecordError)(nil); errors.As(err, &re) {
		if errors.Is(err, bus.ErrSubjectMoved) {
			return res, fmt.Errorf("%s: session %s got records from elsewhere while the import read it; nothing was published: import again (%w)", t.Name, session, re.Err)
		}
		err := fmt.Errorf("%s: %s: record not stored: %w", t.Name, todo[re.Index].Where, re.Err)
		if errors.Is(err, bus.ErrNoAck) {
			return res, fmt.Errorf("%w; it and the records after it may be stored or not: importing again goes on from what session %s holds, or refuses if it lacks a record before ones it holds", err, session)
		}
		if re.StoredAfter > 0 {
			return res, fmt.Errorf("%w; %d records after it were stored all the same: session %s lacks it, and importing the file into it again refuses: import the file into a new --session", err, re.StoredAfter, session)
		}
		return res, fmt.Errorf("%w; session %s holds the records before it: importing again goes on from it", err, session)
	} else if err != nil {
		return res, err
	}
	return res, nil
}

// importGCPercent is the garbage collector's GOGC during an import, when
// the environment sets none.
const importGCPercent = 400

// importAhead is how many records an import's encoder makes ahead of
// the one being sent.
const importAhead = 64

// encoder makes the JSON of records in order, on a goroutine of its own,
// at most ahead records before the one asked for.
type encoder struct {
	ctx    context.Context
	recs   []importer.Record
	out    chan encoded
	sent   int // the records next returned from out
	cancel context.CancelFunc
	done   chan struct{}
}

type encoded struct {
	b   []byte
	err error
}

func encodeAhead(ctx context.Context, recs []importer.Record, ahead int) *encoder {
	ctx, cancel := context.WithCancel(ctx)
	e := &encoder{ctx: ctx, recs: recs, out: make(chan encoded, ahead), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		for i := range recs {
			b, err := recs[i].JSON()
			select {
			case e.out <- encoded{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return // the last record asked for: its error stops the publisher
			}
		}
	}()
	return e
}

// next returns the JSON of record i. The records are asked for in order,
// each once, as bus.Append does; another order makes the record's JSON
// here.
func (e *encoder) next(i int) ([]byte, error) {
	var r encoded
	if i != e.sent {
		r.b, r.err = e.recs[i].JSON()
	} else {
		select {
		case r = <-e.out:
			e.sent++
		case <-e.ctx.Done():
			return nil, e.ctx.Err()
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("encode record: %w", r.err)
	}
	return r.b, nil
}

// stop stops the encoder and waits for it.
func (e *encoder) stop() {
	e.cancel()
	<-e.done
}

// withArticle puts "a" or "an" before a record's class ("a user", "an
// assistant").
func withArticle(class string) string {
	if class != "" && strings.ContainsRune("aeio", rune(class[0])) {
		return "an " + class
	}
	return "a " + class
}

// orderError is a session whose records are not the file's first ones in
// the file's order: record want (an index in the file) is missing, and
// record got is stored where it belongs.
type orderError struct{ want, got int }

// storedPrefix checks the ids a session holds (in stream order) against
// the ids of a file's records: those of the file's records must be its
// first ones, in order, and it returns how many they are. The session
// may hold other records (of other files imported into it, or of live
// publishers) anywhere; abandoned counts those whose id starts with
// prefix, which an import of the same format into the same session
// stored: of a branch the file abandoned since, or of another file.
// Only those after the session's last rewind compaction count (its id
// starts with prefix and importer.RewindID): it repaired the ones before.
// last is the id of the last of them, after prefix.
func storedPrefix(stored, ids []string, prefix string) (n, abandoned int, last string, bad *orderError) {
	p, bad := storedState(stored, ids, prefix)
	return p.n, p.abandoned, p.last, bad
}

// prefixState is what storedState finds.
type prefixState struct {
	n         int    // the file's first records the session holds
	abandoned int    // records of the format after the last rewind, not of the file
	last      string // the id of the last of those, after the prefix
	// context is how many of the file's first records the session's
	// context holds: a rewind compaction holds the file's records up to
	// its fork, and the records after it add theirs. Fewer than n when
	// the file went back to records the session holds before a rewind
	// compaction that left them out.
	context int
}

// storedState is storedPrefix, with what the context holds of the file.
func storedState(stored, ids []string, prefix string) (p prefixState, bad *orderError) {
	if len(stored) == 0 {
		return p, nil // a new session: no need to index the file's ids
	}
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	rewind := prefix + importer.RewindID
	for _, id := range stored {
		i, ok := index[id]
		if !ok {
			switch {
			case strings.HasPrefix(id, rewind):
				p.abandoned, p.last = 0, ""
				p.context = p.n
				fork, _, _ := strings.Cut(strings.TrimPrefix(id, rewind), "@")
				if k, err := strconv.Atoi(fork); err == nil && k >= 0 && k < p.n {
					p.context = k
				}
			case strings.HasPrefix(id, prefix):
				p.abandoned++
				p.last = strings.TrimPrefix(id, prefix)
			}
			continue
		}
		if i != p.n {
			return prefixState{}, &orderError{want: p.n, got: i}
		}
		p.n++
		p.context++
	}
	return p, nil
}

// rewindID is the id of a rewind compaction published after the
// session's last sequence last, fork being how many of the file's
// records it holds: the sequence makes it unique, the fork tells what
// it holds.
func rewindID(fork int, last uint64) string {
	return fmt.Sprintf("%d@%d", fork, last)
}

func (e *orderError) describe(t *importer.Transcript, session string) error {
	want, got := &t.Records[e.want], &t.Records[e.got]
	what := fmt.Sprintf("%s: session %s lacks %s (record %d of %d) but holds records after it, from %s: a stream limit deleted it, or an import failed to store it",
		t.Name, session, want.Where, e.want+1, len(t.Records), got.Where)
	if e.got < e.want {
		what = fmt.Sprintf("%s: session %s holds %s (record %d of %d) again, after %s",
			t.Name, session, got.Where, e.got+1, len(t.Records), t.Records[e.want-1].Where)
	}
	return fmt.Errorf("%s; what follows can no longer be stored in the file's order, so nothing was published: import the file into a new --session", what)
}

// sessionLog reads the ids of a session's records where the stream
// stores them: on a partitioned stream, transcripts.<k>.<session>, after
// those still on transcripts.<session> when it was partitioned with
// records. Its Last is the stored subject's last sequence, the one the
// server checks a publish's expected last subject sequence against;
// last is the session's last sequence on either.
func (p *importPublisher) sessionLog(ctx context.Context, session string) (log *bus.SubjectLog, last uint64, err error) {
	l, err := p.stream.Layout()
	if err != nil {
		return nil, 0, err
	}
	log, err = p.stream.ReadSubjectLog(ctx, l.Subject(session))
	if err != nil || !l.Partitioned() || l.After == 0 {
		if log != nil {
			last = log.Last
		}
		return log, last, err
	}
	old, err := p.stream.ReadSubjectLog(ctx, subject.TranscriptsPrefix+session)
	if err != nil {
		return nil, 0, err
	}
	log.IDs = append(old.IDs, log.IDs...)
	return log, max(log.Last, old.Last), nil
}
