package rebuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Config says what a Rebuilder rebuilds, and how.
type Config struct {
	// Conn reaches the server that holds the stream, and with Check the
	// running service.
	Conn *nats.Conn
	// Stream holds the records: TRANSCRIPTS.
	Stream string
	// Options and Limits must be the service's: they decide what a
	// session's context is, which records it holds and which compaction
	// it restarts from.
	Options projection.Options
	Limits  store.Limits
	// Session, when not empty, is the one session rebuilt.
	Session string
	// From, when above 1, rebuilds only the sessions with a record at or
	// after this stream sequence (each in full).
	From uint64
	// Check rebuilds whole projections, to compare with the running
	// service (Rebuilder.Check); otherwise only checkpoints are gathered,
	// to be written (Rebuilder.WriteCheckpoints).
	Check bool
	// Progress, when not nil, is told how the reading goes.
	Progress Progress
	// Workers rebuild whole projections while the stream is read; 0 means
	// GOMAXPROCS.
	Workers int
	// CompareTimeout bounds each request to the service; 0 means 15s.
	CompareTimeout time.Duration
}

// Progress is told how a rebuild goes: Start once per pass with the work
// it will do and its unit (records read, or with Config.From sessions
// rebuilt: "records" or "sessions"), Update as often as work is done,
// with the work done so far, and Finish at its end.
type Progress interface {
	Start(total uint64, unit string)
	Update(done uint64)
	Finish(done uint64)
}

type noProgress struct{}

func (noProgress) Start(uint64, string) {}
func (noProgress) Update(uint64)        {}
func (noProgress) Finish(uint64)        {}

// Rebuilder rebuilds sessions from the stream: their checkpoints alone,
// which is all that is written, or (Config.Check) their whole
// projections, to compare with the service.
type Rebuilder struct {
	cfg    Config
	stream *bus.Stream
	end    uint64 // the stream's last sequence when it was opened

	cps      *Checkpoints        // without Check
	sessions map[string]*Session // with Check
}

// Open opens the stream and notes where it ends: records stored later
// are not rebuilt (Check reads them when the service has applied them).
func Open(ctx context.Context, cfg Config) (*Rebuilder, error) {
	if cfg.Conn == nil {
		return nil, errors.New("rebuild: no connection")
	}
	if cfg.Progress == nil {
		cfg.Progress = noProgress{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.CompareTimeout <= 0 {
		cfg.CompareTimeout = 15 * time.Second
	}
	st, err := bus.OpenStream(ctx, cfg.Conn, cfg.Stream)
	if err != nil {
		return nil, err
	}
	end, err := st.LastSeq(ctx)
	if err != nil {
		return nil, err
	}
	r := &Rebuilder{cfg: cfg, stream: st, end: end}
	if cfg.Check {
		r.sessions = map[string]*Session{}
	} else {
		r.cps = NewCheckpoints()
		r.cps.Limits = cfg.Limits
	}
	return r, nil
}

// ReadStats says what Read read.
type ReadStats struct {
	Sessions int           // sessions rebuilt
	Records  uint64        // records read
	Took     time.Duration // reading and rebuilding them
}

// Read reads the records of the sessions to rebuild and rebuilds them:
// every session from an ordered consumer over the whole stream, or the
// one session (Config.Session) or the sessions touched since
// Config.From, each from its subject with direct gets.
func (r *Rebuilder) Read(ctx context.Context) (ReadStats, error) {
	start := time.Now()
	var n uint64
	var err error
	switch {
	case r.cfg.Session != "":
		if n, err = r.readSession(ctx, r.cfg.Session, 1, r.end); err != nil {
			err = fmt.Errorf("session %s: %w", r.cfg.Session, err)
		}
	case r.cfg.From <= 1:
		n, err = r.scan(ctx, 1)
	default:
		n, err = r.since(ctx, r.cfg.From)
	}
	if err != nil {
		return ReadStats{}, err
	}
	return ReadStats{Sessions: r.count(), Records: n, Took: time.Since(start)}, nil
}

// count returns the number of sessions rebuilt.
func (r *Rebuilder) count() int {
	if r.cps != nil {
		return len(r.cps.Sessions)
	}
	return len(r.sessions)
}

// touch makes sure a session is rebuilt, even with no records.
func (r *Rebuilder) touch(id string) {
	if r.cps != nil {
		r.cps.Session(id)
	} else if r.sessions[id] == nil {
		r.sessions[id] = NewSession(r.cfg.Options, r.cfg.Limits)
	}
}

// add takes one record of a session, in stream order.
func (r *Rebuilder) add(id string, seq uint64, data []byte) {
	if r.cps != nil {
		r.cps.Add(id, seq, data)
		return
	}
	r.touch(id)
	r.sessions[id].Add(seq, data)
}

// scan reads the stream from a sequence to its end with an ordered
// consumer.
func (r *Rebuilder) scan(ctx context.Context, from uint64) (uint64, error) {
	p := r.cfg.Progress
	p.Start(r.end-min(r.end, from-1), "records")
	add := r.add
	var projs *Projections
	if r.cps == nil {
		// Whole projections: decoding and applying, the bulk of the work,
		// run on other goroutines while the stream is read.
		projs = NewProjections(r.cfg.Options, r.cfg.Limits, r.cfg.Workers)
		add = projs.Add
	}
	var n uint64
	_, _, err := r.stream.Replay(ctx, from, func(m bus.Msg) {
		if m.Seq > r.end {
			return
		}
		n++
		p.Update(n)
		if id, _, err := subject.SessionOfStored(m.Subject); err == nil {
			add(id, m.Seq, m.Data)
		}
	})
	if projs != nil {
		maps.Copy(r.sessions, projs.Close())
	}
	p.Finish(n)
	return n, err
}

// since rebuilds, in full, every session with a record at or after from.
func (r *Rebuilder) since(ctx context.Context, from uint64) (uint64, error) {
	touched := map[string]bool{}
	_, _, err := r.stream.Replay(ctx, from, func(m bus.Msg) {
		if id, _, err := subject.SessionOfStored(m.Subject); err == nil && m.Seq <= r.end {
			touched[id] = true
		}
	})
	if err != nil {
		return 0, err
	}
	p := r.cfg.Progress
	p.Start(uint64(len(touched)), "sessions")
	var n, done uint64
	for id := range touched {
		k, err := r.readSession(ctx, id, 1, r.end)
		if err != nil {
			return n, fmt.Errorf("session %s: %w", id, err)
		}
		n += k
		done++
		p.Update(done)
	}
	p.Finish(done)
	return n, nil
}

// readSession reads one session's records in [from, to] with direct gets.
func (r *Rebuilder) readSession(ctx context.Context, id string, from, to uint64) (uint64, error) {
	var n uint64
	err := r.stream.ReadSession(ctx, id, from, to, func(seq uint64, data []byte) error {
		r.add(id, seq, data)
		n++
		return nil
	})
	if err != nil {
		return n, err
	}
	if n > 0 || r.cps == nil {
		// A session with no records has no checkpoint to write; compared,
		// it is the empty context the service answers.
		r.touch(id)
	}
	return n, nil
}

// WriteCheckpoints stores the checkpoint of every session read in the
// checkpoint bucket (Write) and returns how many it stored.
func (r *Rebuilder) WriteCheckpoints(ctx context.Context) (int, error) {
	if r.cps == nil {
		return 0, errors.New("rebuild: whole projections (Config.Check) are compared, not written")
	}
	bucket, err := r.stream.OpenCheckpoints(ctx)
	if err != nil {
		return 0, err
	}
	if err := Write(ctx, bucket, r.cps.Sessions); err != nil {
		return 0, err
	}
	return len(r.cps.Sessions), nil
}

// CheckResult says how the rebuilt sessions compare with the service.
type CheckResult struct {
	Sessions int            // sessions compared, or tried
	Differ   []string       // the sessions whose context differs, by id
	Failed   []SessionError // the sessions that could not be compared, by id
}

// SessionError is a session that could not be compared, and why.
type SessionError struct {
	Session string
	Err     error
}

func (e SessionError) Error() string { return "session " + e.Session + ": " + e.Err.Error() }

func (e SessionError) Unwrap() error { return e.Err }

// Check compares every session read with what the running service
// answers for it. A session that cannot be compared (the request fails,
// the reply is not a context) is listed in Failed and the others are
// compared all the same. The error is not nil only when the comparison
// as a whole stopped (ctx ended).
func (r *Rebuilder) Check(ctx context.Context) (CheckResult, error) {
	if r.sessions == nil {
		return CheckResult{}, errors.New("rebuild: checkpoints are written, not compared (Config.Check)")
	}
	res := CheckResult{Sessions: len(r.sessions)}
	for _, id := range slices.Sorted(maps.Keys(r.sessions)) {
		same, err := r.compare(ctx, id, r.sessions[id])
		if err := ctx.Err(); err != nil {
			return res, err
		}
		switch {
		case err != nil:
			res.Failed = append(res.Failed, SessionError{id, err})
		case !same:
			res.Differ = append(res.Differ, id)
		}
	}
	return res, nil
}

// compare fetches the live context at or past the rebuilt sequence;
// when the service has moved on, it reads the session's newer records up
// to the live reply's sequence and compares with that same reply.
func (r *Rebuilder) compare(ctx context.Context, id string, s *Session) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.CompareTimeout)
	defer cancel()
	msg := nats.NewMsg(subject.ContextPrefix + id)
	msg.Data = protocol.Request{MinSeq: s.Proj.Seq(), WaitMS: 10000, HasWait: true}.AppendJSON(nil)
	data, err := client.Do(rctx, r.cfg.Conn, msg)
	if err != nil {
		return false, err
	}
	live, err := record.DecodeJSON(data)
	if err != nil {
		return false, fmt.Errorf("reply: %w", err)
	}
	m, _ := live.(*record.Map)
	if m == nil {
		return false, errors.New("reply is not an object")
	}
	liveSeq, _ := m.Get("seq")
	ls, _ := record.IntegerString(liveSeq)
	seq, _ := strconv.ParseUint(ls, 10, 64)
	if seq > s.Proj.Seq() {
		if _, err := r.readSession(ctx, id, s.Proj.Seq()+1, seq); err != nil {
			return false, err
		}
	}
	msgs, _ := m.Get("messages")
	want, err := record.DecodeJSON(s.Proj.AppendJSON(nil))
	if err != nil {
		return false, err
	}
	dropped, _ := m.Get("dropped")
	wantDropped, err := json.Marshal(s.Proj.Dropped())
	if err != nil {
		return false, err
	}
	wd, _ := record.DecodeJSON(wantDropped)
	return seq == s.Proj.Seq() && record.Equal(want, msgs) && record.Equal(wd, dropped), nil
}
