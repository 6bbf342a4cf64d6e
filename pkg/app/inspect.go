package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/inspect"
	"github.com/ctxd/ctxd/pkg/ops"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// InspectConfig returns what decides the app's contexts, for the
// inspector to show the same ones.
func (a *App) InspectConfig() inspect.Config {
	return inspect.Config{
		Options: projection.Options{BrowserTools: a.BrowserTools},
		Limits:  store.Limits{MaxRecordBytes: a.MaxRecordBytes, MaxSessionBytes: a.MaxSessionBytes},
	}
}

// InspectSource returns the inspector's source over the running app:
// the records of its stream, and its live projections and rejected
// list. Call it after Open.
//
// It reads the stream on a connection of its own, opened at its first
// read and closed by Close: a view reads a session's whole history,
// several MiB a record with screenshots, and on the app's connection
// those replies would queue ahead of the ingest's deliveries and the
// service's requests, and a slow reader there gets the connection reset.
func (a *App) InspectSource() inspect.Source {
	return &inspectSource{StreamReader: StreamReader{Stream: streamName()}, a: a}
}

// inspectConn is the inspector's connection, opened at its first use.
type inspectConn struct {
	mu     sync.Mutex
	nc     *nats.Conn
	closed bool
}

// get returns the connection, connecting to the app's server with the
// app's options (credentials, TLS) the first time.
//
// The connect runs without the lock: views that wait for it, and Close,
// never wait behind a server that is slow to answer. Two views that
// connect at once keep the first connection made.
func (c *inspectConn) get(a *App) (*nats.Conn, error) {
	c.mu.Lock()
	if c.closed || a.url == "" {
		c.mu.Unlock()
		return nil, errors.New("ctxd is not running")
	}
	if nc := c.nc; nc != nil {
		c.mu.Unlock()
		return nc, nil
	}
	c.mu.Unlock()
	opts := []nats.Option{nats.Name("ctxd " + a.Instance + " inspector"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond), nats.PingInterval(2 * time.Second), nats.MaxPingsOutstanding(2)}
	nc, err := nats.Connect(a.url, append(opts, a.NATSOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("inspector: connect to %s: %w", Redact(a.url), RedactError(a.url, err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		nc.Close()
		return nil, errors.New("ctxd is not running")
	case c.nc != nil:
		nc.Close()
		return c.nc, nil
	}
	c.nc = nc
	return nc, nil
}

func (c *inspectConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
	}
}

func streamName() string {
	def, err := streams.Transcripts()
	if err != nil {
		panic(fmt.Sprintf("the embedded stream definition: %v", err)) // checked by tests of streams
	}
	return def.Name
}

// StreamReader reads sessions' records from the stream, with validated
// direct gets: what ctxd inspect reads with no service running.
type StreamReader struct {
	NC     *nats.Conn
	Stream string
}

// Records implements inspect.Reader.
func (s StreamReader) Records(ctx context.Context, session string, to uint64, fn func(seq uint64, data []byte) error) error {
	if err := subject.CheckSession(session); err != nil {
		return err
	}
	st, err := bus.OpenStream(ctx, s.NC, s.Stream)
	if err != nil {
		return err
	}
	return st.ReadSession(ctx, session, 1, to, fn) // wherever the stream stores it
}

// Sizes calls fn with the sequence and size of each of a session's
// records from from up to to, from their headers, without reading the
// records: what a view of a session larger than it reads lists.
func (s StreamReader) Sizes(ctx context.Context, session string, from, to uint64, fn func(seq uint64, size int) error) error {
	if err := subject.CheckSession(session); err != nil {
		return err
	}
	st, err := bus.OpenStream(ctx, s.NC, s.Stream)
	if err != nil {
		return err
	}
	return st.SessionSizes(ctx, session, from, to, fn)
}

// Last returns the stream sequence of a session's last record, 0 when
// it has none, from its headers.
func (s StreamReader) Last(ctx context.Context, session string) (uint64, error) {
	if err := subject.CheckSession(session); err != nil {
		return 0, err
	}
	st, err := bus.OpenStream(ctx, s.NC, s.Stream)
	if err != nil {
		return 0, err
	}
	return st.SessionLast(ctx, session)
}

type inspectSource struct {
	StreamReader
	a *App // nil: StreamReader.NC is the connection

	// listed is the stream's subjects as the sessions list found them
	// last: listed again, only those that moved have their last record
	// loaded by the server.
	mu     sync.Mutex
	listed []bus.SubjectState
}

// conn returns the connection the source reads on.
func (s *inspectSource) conn() (*nats.Conn, error) {
	if s.a == nil {
		return s.NC, nil
	}
	return s.a.inspectConn.get(s.a)
}

func (s *inspectSource) Records(ctx context.Context, session string, to uint64, fn func(seq uint64, data []byte) error) error {
	nc, err := s.conn()
	if err != nil {
		return err
	}
	return StreamReader{NC: nc, Stream: s.Stream}.Records(ctx, session, to, fn)
}

func (s *inspectSource) Sizes(ctx context.Context, session string, from, to uint64, fn func(seq uint64, size int) error) error {
	nc, err := s.conn()
	if err != nil {
		return err
	}
	return StreamReader{NC: nc, Stream: s.Stream}.Sizes(ctx, session, from, to, fn)
}

func (s *inspectSource) Last(ctx context.Context, session string) (uint64, error) {
	nc, err := s.conn()
	if err != nil {
		return 0, err
	}
	return StreamReader{NC: nc, Stream: s.Stream}.Last(ctx, session)
}

func (s *inspectSource) Sessions(ctx context.Context) ([]inspect.SessionRef, error) {
	nc, err := s.conn()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	before := s.listed
	s.mu.Unlock()
	subs, err := bus.ListSubjects(ctx, nc, s.Stream, subject.TranscriptsPrefix+">", before)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.listed = subs
	s.mu.Unlock()
	out := make([]inspect.SessionRef, 0, len(subs))
	at := map[string]int{} // a session on two subjects (a stream partitioned with records) is listed once
	for _, st := range subs {
		id, _, err := subject.SessionOfStored(st.Subject)
		if err != nil {
			continue // its records are in the rejected list
		}
		if i, ok := at[id]; ok {
			out[i].Records += st.Messages
			out[i].LastSeq = max(out[i].LastSeq, st.Last)
			continue
		}
		at[id] = len(out)
		out = append(out, inspect.SessionRef{ID: id, Records: st.Messages, LastSeq: st.Last})
	}
	return out, nil
}

func (s *inspectSource) Summary(ctx context.Context, session string) (inspect.Summary, error) {
	var sum inspect.Summary
	// Read up to the session's last record, as a request without
	// min_seq is: an instance that does not ingest reads the tail.
	v, err := s.a.roles.Reach(ctx, session, 0, 0)
	if err != nil {
		return sum, err
	}
	err = v.View(ctx, session, func(p *projection.Session) {
		if p != nil {
			sum = inspect.Summarize(p.Seq(), p.Messages(), p.Dropped())
		}
	})
	return sum, err
}

func (s *inspectSource) Record(ctx context.Context, seq uint64) (string, []byte, error) {
	nc, err := s.conn()
	if err != nil {
		return "", nil, err
	}
	var subj string
	var data []byte
	err = bus.ReadRange(ctx, nc, s.Stream, seq, seq, func(m bus.Msg) error {
		if m.Seq == seq {
			subj, data = m.Subject, m.Data
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	if data == nil && subj == "" {
		return "", nil, fmt.Errorf("no record at seq %d", seq)
	}
	return subj, data, nil
}

func (s *inspectSource) Rejected(ctx context.Context) ([]store.Rejection, error) {
	return s.a.roles.Rejected(), nil
}

// Applied is the ingest's position while this instance ingests, else the
// stream's last sequence: an instance that reads per request follows the
// stream itself.
func (s *inspectSource) Applied() uint64 {
	if st := s.a.roles.IngestStore(); st != nil {
		return st.Applied()
	}
	ctx, cancel := context.WithTimeout(s.a.life, 2*time.Second)
	defer cancel()
	last, _, err := s.a.st.State(ctx)
	if err != nil {
		return 0
	}
	return last
}

// inspector is the inspector mounted at /ui/ on the operators' listener:
// it answers 503 until the app serves (the listener opens first), then
// serves the running app's sessions; close ends its event streams, which
// would otherwise hold the listener's shutdown.
type inspector struct {
	a *App

	mu     sync.Mutex
	h      *inspect.Handler
	closed bool
}

func (m *inspector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := m.handler()
	if h == nil {
		http.Error(w, "ctxd is starting", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

func (m *inspector) handler() *inspect.Handler {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.h == nil && !m.closed && m.a.Serving() {
		opt := inspect.Options{Config: m.a.InspectConfig(), Logger: m.a.Logger, ReadRate: m.a.InspectReadRate}
		if m.a.HTTPToken != "" {
			opt.Logout = ops.LogoutPath // a browser's login (package ops)
		}
		m.h = inspect.New(m.a.InspectSource(), opt)
	}
	if m.closed {
		return nil
	}
	return m.h
}

func (m *inspector) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.h != nil {
		m.h.Close()
	}
}
