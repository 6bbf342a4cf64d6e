package main

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/rebuild"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
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
each session that differs, and exits 1 when any does. It prints
"no differences" when all is well.

Give --browser-tools, --max-record-bytes and --max-session-bytes the values
the service runs with: they decide which records a session holds and which
compaction it restarts from, so with others the rebuild disagrees with the
service.`

func runRebuild(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "rebuild", "rebuild [flags]", rebuildAbout)
	url := fs.String("nats", natsURL(e), "NATS server URL")
	session := fs.String("session", "", "rebuild only this session")
	from := fs.Uint64("from", 1, "rebuild the sessions that have records at or after this stream sequence")
	check := fs.Bool("check", false, "compare with the running service instead of writing checkpoints")
	browser := fs.String("browser-tools", "browser_use", "comma-separated tool names whose screenshots are trimmed (as the service is configured)")
	lim := store.DefaultLimits()
	fs.IntVar(&lim.MaxRecordBytes, "max-record-bytes", lim.MaxRecordBytes, "largest record decoded, as the service is configured")
	fs.Int64Var(&lim.MaxSessionBytes, "max-session-bytes", lim.MaxSessionBytes, "bytes of records one session may hold since its latest compaction, as the service is configured")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "ctxd rebuild: takes no arguments, got %q\n", pos)
		return errUsage
	}
	if *session != "" {
		if err := subject.CheckSession(*session); err != nil {
			return err
		}
	}
	nc, err := connect(*url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	def, err := streams.Transcripts()
	if err != nil {
		return err
	}
	rb := newRebuilder(nc, js, def.Name, projection.Options{BrowserTools: splitList(*browser)}, lim, *check)
	start := time.Now()
	st, err := js.Stream(ctx, def.Name)
	if err != nil {
		return fmt.Errorf("stream %s: %w", def.Name, err)
	}
	end := st.CachedInfo().State.LastSeq
	var n uint64
	switch {
	case *session != "":
		n, err = rb.readSession(ctx, *session, 1, end)
	case *from <= 1:
		n, err = rb.scan(ctx, e, 1, end)
	default:
		n, err = rb.since(ctx, e, *from, end)
	}
	if err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(e.stderr, "rebuilt %d sessions from %d records in %s (%.0f records/s)\n",
		rb.count(), n, took.Round(time.Millisecond), float64(n)/max(took.Seconds(), 1e-9))
	if *check {
		return rb.check(ctx, e)
	}
	return rb.writeCheckpoints(ctx, e)
}

// rebuilder rebuilds either the sessions' checkpoints alone (cps), which
// is all that is written, or their whole projections (sessions), which
// --check compares with the service.
type rebuilder struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	stream   string
	opt      projection.Options
	lim      store.Limits
	cps      *rebuild.Checkpoints        // without --check
	sessions map[string]*rebuild.Session // with --check
}

func newRebuilder(nc *nats.Conn, js jetstream.JetStream, stream string, opt projection.Options, lim store.Limits, check bool) *rebuilder {
	rb := &rebuilder{nc: nc, js: js, stream: stream, opt: opt, lim: lim}
	if check {
		rb.sessions = map[string]*rebuild.Session{}
	} else {
		rb.cps = rebuild.NewCheckpoints()
		rb.cps.Limits = lim
	}
	return rb
}

// count returns the number of sessions rebuilt.
func (rb *rebuilder) count() int {
	if rb.cps != nil {
		return len(rb.cps.Sessions)
	}
	return len(rb.sessions)
}

// touch makes sure a session is rebuilt, even with no records.
func (rb *rebuilder) touch(id string) {
	if rb.cps != nil {
		rb.cps.Session(id)
	} else if rb.sessions[id] == nil {
		rb.sessions[id] = rebuild.NewSession(rb.opt, rb.lim)
	}
}

// apply takes one record of a session, in stream order.
func (rb *rebuilder) apply(id string, seq uint64, data []byte) {
	if rb.cps != nil {
		rb.cps.Add(id, seq, data)
		return
	}
	rb.touch(id)
	rb.sessions[id].Add(seq, data)
}

// scan reads the stream from a sequence to its end with an ordered consumer.
func (rb *rebuilder) scan(ctx context.Context, e *env, from, end uint64) (uint64, error) {
	p := newProgress(e.stderr, "rebuild", end-min(end, from-1))
	apply := rb.apply
	var projs *rebuild.Projections
	if rb.cps == nil {
		// Whole projections: decoding and applying, the bulk of the work,
		// run on other goroutines while the stream is read.
		projs = rebuild.NewProjections(rb.opt, rb.lim, runtime.GOMAXPROCS(0))
		apply = projs.Add
	}
	var n uint64
	_, _, err := bus.Replay(ctx, rb.js, rb.stream, from, func(m bus.Msg) {
		if m.Seq > end {
			return
		}
		n++
		p.update(n)
		if id, err := subject.SessionOf(m.Subject, subject.TranscriptsPrefix); err == nil {
			apply(id, m.Seq, m.Data)
		}
	})
	if projs != nil {
		maps.Copy(rb.sessions, projs.Close())
	}
	p.finish(n)
	return n, err
}

// since rebuilds, in full, every session with a record at or after from.
func (rb *rebuilder) since(ctx context.Context, e *env, from, end uint64) (uint64, error) {
	touched := map[string]bool{}
	_, _, err := bus.Replay(ctx, rb.js, rb.stream, from, func(m bus.Msg) {
		if id, err := subject.SessionOf(m.Subject, subject.TranscriptsPrefix); err == nil && m.Seq <= end {
			touched[id] = true
		}
	})
	if err != nil {
		return 0, err
	}
	p := newProgress(e.stderr, "rebuild", uint64(len(touched)))
	var n, done uint64
	for id := range touched {
		k, err := rb.readSession(ctx, id, 1, end)
		if err != nil {
			return n, err
		}
		n += k
		done++
		p.update(done)
	}
	p.finish(done)
	return n, nil
}

// readSession reads one session's records in [from, to] with direct gets.
func (rb *rebuilder) readSession(ctx context.Context, id string, from, to uint64) (uint64, error) {
	var n uint64
	err := bus.ReadSubject(ctx, rb.nc, rb.stream, subject.TranscriptsPrefix+id, from, to, func(seq uint64, data []byte) error {
		rb.apply(id, seq, data)
		n++
		return nil
	})
	if err == nil {
		rb.touch(id)
	}
	return n, err
}

func (rb *rebuilder) writeCheckpoints(ctx context.Context, e *env) error {
	bucket, err := bus.OpenCheckpoints(ctx, rb.js, 0)
	if err != nil {
		return err
	}
	if err := rebuild.Write(ctx, bucket, rb.cps.Sessions); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %d checkpoints\n", len(rb.cps.Sessions))
	return nil
}

// check compares every rebuilt session with the running service.
func (rb *rebuilder) check(ctx context.Context, e *env) error {
	var differ []string
	for _, id := range rb.sorted() {
		r := rb.sessions[id]
		same, err := rb.compare(ctx, id, r)
		if err != nil {
			return err
		}
		if !same {
			differ = append(differ, id)
			fmt.Fprintf(e.stdout, "differs: %s\n", id)
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("%d of %d sessions differ from the running service", len(differ), len(rb.sessions))
	}
	fmt.Fprintf(e.stdout, "no differences (%d sessions)\n", len(rb.sessions))
	return nil
}

// compare fetches the live context at or past the rebuilt sequence;
// when the service has moved on, it reads the session's newer records up
// to the live reply's sequence and compares with that same reply.
func (rb *rebuilder) compare(ctx context.Context, id string, r *rebuild.Session) (bool, error) {
	body := fmt.Sprintf(`{"min_seq":%d,"wait_ms":10000}`, r.Proj.Seq())
	data, err := request(ctx, rb.nc, subject.ContextPrefix+id, []byte(body), 15*time.Second)
	if err != nil {
		return false, fmt.Errorf("session %s: %w", id, err)
	}
	live, err := record.DecodeJSON(data)
	if err != nil {
		return false, fmt.Errorf("session %s: reply: %w", id, err)
	}
	m, _ := live.(*record.Map)
	if m == nil {
		return false, fmt.Errorf("session %s: reply is not an object", id)
	}
	liveSeq, _ := m.Get("seq")
	ls, _ := record.IntegerString(liveSeq)
	seq, _ := strconv.ParseUint(ls, 10, 64)
	if seq > r.Proj.Seq() {
		if _, err := rb.readSession(ctx, id, r.Proj.Seq()+1, seq); err != nil {
			return false, err
		}
	}
	msgs, _ := m.Get("messages")
	want, err := record.DecodeJSON(r.Proj.AppendJSON(nil))
	if err != nil {
		return false, err
	}
	dropped, _ := m.Get("dropped")
	wantDropped, err := jsonMarshal(r.Proj.Dropped())
	if err != nil {
		return false, err
	}
	wd, _ := record.DecodeJSON(wantDropped)
	return seq == r.Proj.Seq() && record.Equal(want, msgs) && record.Equal(wd, dropped), nil
}

func (rb *rebuilder) sorted() []string {
	ids := make([]string, 0, len(rb.sessions))
	for id := range rb.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
