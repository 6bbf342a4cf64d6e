package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/importer"
)

// followInterval is how often a followed file's size and modification
// time are looked at.
const followInterval = 300 * time.Millisecond

// followRetry is how long a file whose records could not be published
// waits before it is tried again, when it does not change meanwhile.
const followRetry = 5 * time.Second

// followConnOptions are the connection options of a follow, which runs
// for as long as the tools do: it reconnects for as long as it takes
// (nats.go gives up after 60 tries, 2 s apart, by default, and a follow
// would then publish nothing more), and says when it is cut off and when
// it is back. What the files add meanwhile is published once it is.
func followConnOptions(e *env) []nats.Option {
	return []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				fmt.Fprintf(e.stderr, "ctxd import: nats disconnected (%v): reconnecting; what the files add is published once it is back\n", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			fmt.Fprintf(e.stderr, "ctxd import: nats reconnected to %s\n", nc.ConnectedUrlRedacted())
		}),
	}
}

// follower publishes the records of files as the tools write them: it
// looks at each file (and at each file under a followed directory) every
// interval, and converts and publishes a file again whenever its size,
// modification time or identity changed. The ids of the records make
// this idempotent: the publisher sends only what the session lacks.
type follower struct {
	e        *env
	pub      *importPublisher
	parser   importer.Parser
	format   importer.Format
	session  string        // --session, or "" for the sessions the files name
	batch    time.Duration // bounds each publish (0: no bound)
	interval time.Duration
	out      *bufio.Writer
	paths    []string
	files    map[string]*followedFile
}

// followedFile is what a follower knows of a file.
type followedFile struct {
	info    os.FileInfo // when it was last converted
	seen    bool        // converted once: its summary was written
	retryAt time.Time   // its records failed; zero when they did not
	failed  string      // the error last written, written once
	// holding says records were held back when it was last converted,
	// because the tool could still write them again: the follow publishes
	// them as it stops, from the file as it is then.
	holding bool
}

// run follows the files until ctx ends, and returns nil then: stopping
// is how following ends.
func (f *follower) run(ctx context.Context) error {
	fmt.Fprintf(f.e.stderr, "following %s (Ctrl-C stops)\n", strings.Join(f.paths, ", "))
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		if f.pub.nc.IsClosed() {
			// Not reconnecting any more (closed by the server, or by an
			// error nats.go does not retry): stop loudly rather than
			// follow without publishing.
			return fmt.Errorf("the NATS connection is closed (%v): nothing more would be published; what the files hold is published when the follow is started again", f.pub.nc.LastError())
		}
		f.scan(ctx)
		if err := f.out.Flush(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			f.flush()
			fmt.Fprintln(f.e.stderr, "stopped following")
			return f.out.Flush()
		case <-t.C:
		}
	}
}

// scan looks at every followed file once.
func (f *follower) scan(ctx context.Context) {
	present := map[string]bool{}
	for _, p := range f.paths {
		for _, name := range f.list(p) {
			if ctx.Err() != nil {
				return
			}
			present[name] = true
			f.look(ctx, name)
		}
	}
	for name := range f.files {
		if !present[name] && !slices.Contains(f.paths, name) {
			// A path given keeps its entry: an error about it is written
			// once, however long it lasts.
			fmt.Fprintf(f.e.stderr, "%s: gone; what was published stays\n", name)
			delete(f.files, name)
		}
	}
}

// list returns the files a followed path names: itself, or the
// transcripts under a directory (.jsonl and .json files, at any depth),
// in lexical order.
func (f *follower) list(p string) []string {
	st, err := os.Stat(p)
	if err != nil {
		f.report(p, err)
		return nil
	}
	if !st.IsDir() {
		return []string{p}
	}
	var names []string
	filepath.WalkDir(p, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a folder removed while walked, or unreadable: skipped
		}
		if d.Type().IsRegular() && (strings.HasSuffix(name, ".jsonl") || strings.HasSuffix(name, ".json")) {
			names = append(names, name)
		}
		return nil
	})
	return names
}

// report writes an error about a followed path once, until another one
// replaces it.
func (f *follower) report(name string, err error) {
	ff := f.file(name)
	if msg := err.Error(); msg != ff.failed {
		ff.failed = msg
		fmt.Fprintf(f.e.stderr, "ctxd import: %v\n", err)
	}
}

func (f *follower) file(name string) *followedFile {
	ff := f.files[name]
	if ff == nil {
		ff = &followedFile{}
		f.files[name] = ff
	}
	return ff
}

// look converts and publishes a file if it changed since it was last
// converted, or if its records failed and it is time to try again.
func (f *follower) look(ctx context.Context, name string) {
	ff := f.file(name)
	st, err := os.Stat(name)
	if err != nil {
		f.report(name, err)
		return
	}
	changed := ff.info == nil || !os.SameFile(ff.info, st) || st.Size() != ff.info.Size() || !st.ModTime().Equal(ff.info.ModTime())
	if !changed && (ff.retryAt.IsZero() || time.Now().Before(ff.retryAt)) {
		return
	}
	if ff.info != nil && (!os.SameFile(ff.info, st) || st.Size() < ff.info.Size()) {
		fmt.Fprintf(f.e.stderr, "%s: replaced or cut shorter: read again from its start\n", name)
	}
	ff.info = st
	ff.retryAt = time.Time{}
	data, err := f.read(name)
	if err == nil && len(data) == 0 {
		return // nothing complete written yet
	}
	var ts []*importer.Transcript
	if err == nil {
		ts, err = f.parser.ParseBytes(f.format, name, data)
	}
	if err != nil {
		// A file being written may not decode yet (a JSON file rewritten
		// whole): it is converted again once it changes.
		if errors.Is(err, importer.ErrLineTooLong) {
			err = fmt.Errorf("%w (--max-line)", err)
		}
		if errors.Is(err, importer.ErrFileTooLarge) {
			err = fmt.Errorf("%w (--max-file)", err)
		}
		f.report(name, err)
		return
	}
	if err := f.publish(ctx, ff, name, ts); err != nil {
		if ctx.Err() != nil {
			return
		}
		ff.retryAt = time.Now().Add(followRetry)
		f.report(name, err)
		return
	}
	ff.failed = ""
	ff.seen = true
}

// read returns a file's complete lines: a line the tool is still writing
// is left for later. A .json file (Gemini CLI's older format, rewritten
// whole) is read as it is.
func (f *follower) read(name string) ([]byte, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	max := f.parser.MaxFile
	if max <= 0 {
		max = importer.DefaultMaxFile
	}
	data, err := io.ReadAll(io.LimitReader(fh, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", name, importer.ErrFileTooLarge, max)
	}
	if strings.HasSuffix(name, ".json") {
		return data, nil
	}
	i := strings.LastIndexByte(string(data), '\n')
	return data[:i+1], nil
}

// flush publishes, as the follow stops, the records it held back because
// the tool could still write them again (Transcript.Unsettled): the last
// version the file holds now. Each file's within the batch bound, or
// followStopBound when there is none.
func (f *follower) flush() {
	names := slices.Sorted(maps.Keys(f.files))
	for _, name := range names {
		ff := f.files[name]
		if !ff.holding {
			continue
		}
		ff.holding = false
		data, err := f.read(name)
		var ts []*importer.Transcript
		if err == nil {
			ts, err = f.parser.ParseBytes(f.format, name, data)
		}
		if err != nil {
			fmt.Fprintf(f.e.stderr, "ctxd import: %s: the records held back were not published as the follow stopped: %v\n", name, err)
			continue
		}
		bound := f.batch
		if bound <= 0 {
			bound = followStopBound
		}
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		for i, t := range ts {
			if t.Unsettled == 0 {
				continue
			}
			sess := f.sessionOf(i, t)
			t.Unsettled = 0 // the last version: nothing more is read
			res, err := f.pub.publish(ctx, t, sess, true)
			if err != nil {
				fmt.Fprintf(f.e.stderr, "ctxd import: %s: session %s: the records held back were not published as the follow stopped: %v\n", name, sess, err)
				continue
			}
			if res.published > 0 {
				fmt.Fprintf(f.e.stderr, "%s: %s, session %s: %d held back, published as the follow stopped, last sequence %d\n", name, t.Format, sess, res.published, res.last)
				fmt.Fprintf(f.out, "%s %d\n", sess, res.last)
			}
		}
		cancel()
	}
}

// followStopBound bounds the publish of the records held back, as the
// follow stops, when --timeout sets no bound.
const followStopBound = 30 * time.Second

// sessionOf is the session the i-th transcript of a file goes to.
func (f *follower) sessionOf(i int, t *importer.Transcript) string {
	if f.session == "" {
		return t.Session
	}
	if i > 0 {
		return importer.AgentSession(f.session, t.Agent)
	}
	return f.session
}

// publish publishes the sessions of a converted file, each within the
// batch bound, and says what was new.
func (f *follower) publish(ctx context.Context, ff *followedFile, name string, ts []*importer.Transcript) error {
	var errs []error
	ff.holding = false
	for i, t := range ts {
		ff.holding = ff.holding || t.Unsettled > 0
		sess := f.sessionOf(i, t)
		bctx, cancel := ctx, context.CancelFunc(func() {})
		if f.batch > 0 {
			bctx, cancel = context.WithTimeout(ctx, f.batch)
		}
		res, err := f.pub.publish(bctx, t, sess, true)
		cancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%s: session %s: not published within --timeout %s: %w", name, sess, f.batch, err)
			}
			errs = append(errs, err)
			continue
		}
		head := fmt.Sprintf("%s: %s, session %s", name, t.Format, sess)
		switch {
		case !ff.seen:
			held := ""
			if res.held > 0 {
				held = fmt.Sprintf(", %d held back until the tool writes past them", res.held)
			}
			fmt.Fprintf(f.e.stderr, "%s: %d records, %d published, %d already in the stream%s, last sequence %d\n%s",
				head, len(t.Records), res.published, res.present, held, res.last, t.Report.Summary("  "))
		case res.published > 0 || res.rewound:
			fmt.Fprintf(f.e.stderr, "%s: %d published, last sequence %d\n", head, res.published, res.last)
		}
		if res.rewound {
			fmt.Fprintf(f.e.stderr, "%s: rewound: the context held records the file no longer produces, or lacked ones it does; a compaction of the branch the file goes on from was published before the rest\n", head)
		}
		if res.abandoned > 0 {
			fmt.Fprintf(f.e.stderr, "%s: warning: session %s holds %d records of %s files that this file does not produce\n", name, sess, res.abandoned, t.Format)
		}
		if !ff.seen || res.published > 0 || res.rewound {
			fmt.Fprintf(f.out, "%s %d\n", sess, res.last)
		}
	}
	return errors.Join(errs...)
}
