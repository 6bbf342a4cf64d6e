package bus

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/pkg/subject"
)

// Stream is the handle of a stream over a connection, with the buckets
// beside it: what a caller holds instead of JetStream's handles (ctxd
// serve through SetUp, ctxd import through FindStream, ctxd rebuild and
// the inspector through OpenStream). Its methods read and write as the
// package's functions of the same names do.
type Stream struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	name string
	st   jetstream.Stream // as found when the handle was made
}

// OpenStream opens the stream called name; the error wraps
// jetstream.ErrStreamNotFound when there is none, and is an
// *UnfinishedError when its partitioning was stopped half way
// (CheckLayout): reads of its sessions would miss records.
func OpenStream(ctx context.Context, nc *nats.Conn, name string) (*Stream, error) {
	js, err := JetStream(nc)
	if err != nil {
		return nil, err
	}
	st, err := lookUp(ctx, js, name)
	if err != nil {
		return nil, err
	}
	l, err := LayoutOf(st.CachedInfo().Config)
	if err != nil {
		return nil, err
	}
	if err := CheckLayout(ctx, nc, l); err != nil {
		return nil, err
	}
	return &Stream{nc: nc, js: js, name: name, st: st}, nil
}

// lookUp asks for the stream's information, and asks again while a
// cluster that lost its leaders does not answer (see retryAPI).
func lookUp(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := retryAPI(ctx, func(ctx context.Context) (err error) {
		st, err = js.Stream(ctx, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return st, nil
}

// Name returns the stream's name.
func (s *Stream) Name() string { return s.name }

// LastSeq returns the stream's last sequence, as the server says now.
func (s *Stream) LastSeq(ctx context.Context) (uint64, error) {
	st, err := lookUp(ctx, s.js, s.name)
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.LastSeq, nil
}

// Replay reads the stream from sequence from on with an ordered consumer
// (see the function Replay).
func (s *Stream) Replay(ctx context.Context, from uint64, h Handler) (n int, last uint64, err error) {
	return Replay(ctx, s.js, s.name, from, h)
}

// ReadSubject reads a subject's records with batched direct gets (see the
// function ReadSubject).
func (s *Stream) ReadSubject(ctx context.Context, subject string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	return ReadSubject(ctx, s.nc, s.name, subject, from, to, fn)
}

// ReadSession reads a session's records wherever the stream stores them
// (see Layout.ReadSubject).
func (s *Stream) ReadSession(ctx context.Context, session string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	st, err := lookUp(ctx, s.js, s.name)
	if err != nil {
		return err
	}
	l, err := LayoutOf(st.CachedInfo().Config)
	if err != nil {
		return err
	}
	return l.ReadSubject(ctx, s.nc, session, from, to, fn)
}

// OpenCheckpoints opens the checkpoint bucket on the stream's server (see
// the function OpenCheckpoints), creating it when it is missing.
func (s *Stream) OpenCheckpoints(ctx context.Context) (*Checkpoints, error) {
	st, err := lookUp(ctx, s.js, s.name)
	if err != nil {
		return nil, err
	}
	cps, err := OpenCheckpoints(ctx, s.js, 0)
	if err != nil {
		return nil, err
	}
	cps.Stream = StreamIdentity(st.CachedInfo())
	return cps, nil
}

// SessionSizes calls fn with the stream sequence and the size in bytes of
// each of a session's records from from up to to, in order, wherever the
// stream stores them, without reading them: an ordered consumer that
// delivers headers only, the size in each message's Nats-Msg-Size, so that
// a few hundred bytes travel per record however large it is. The server
// still loads each record from its store to send its headers, a few MiB
// at a time (see readHeaders); from past the records already listed lists
// only what is new.
func (s *Stream) SessionSizes(ctx context.Context, session string, from, to uint64, fn func(seq uint64, size int) error) error {
	filters, err := s.sessionFilters(ctx, session)
	if err != nil {
		return err
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	if err := readSizes(ctx, s.js, s.name, cfg, to, fn); err != nil {
		return fmt.Errorf("stream %s: sizes of %s: %w", s.name, session, err)
	}
	return nil
}

// SessionLast returns the stream sequence of a session's last record, 0
// when it has none, wherever the stream stores it: from the headers of
// the last message of its subjects, the one record the server loads.
func (s *Stream) SessionLast(ctx context.Context, session string) (uint64, error) {
	filters, err := s.sessionFilters(ctx, session)
	if err != nil {
		return 0, err
	}
	var last uint64
	err = readHeaders(ctx, s.js, s.name, jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy},
		func(_ jetstream.Msg, meta *jetstream.MsgMetadata) error {
			last = max(last, meta.Sequence.Stream)
			return nil
		})
	if err != nil {
		return 0, fmt.Errorf("stream %s: last of %s: %w", s.name, session, err)
	}
	return last, nil
}

// sessionFilters are the subjects a session's records are stored on.
func (s *Stream) sessionFilters(ctx context.Context, session string) ([]string, error) {
	st, err := lookUp(ctx, s.js, s.name)
	if err != nil {
		return nil, err
	}
	l, err := LayoutOf(st.CachedInfo().Config)
	if err != nil {
		return nil, err
	}
	filters := []string{l.Subject(session)}
	if l.mixed() {
		filters = append(filters, subject.TranscriptsPrefix+session)
	}
	return filters, nil
}

func readSizes(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig, to uint64, fn func(seq uint64, size int) error) error {
	return readHeaders(ctx, js, stream, cfg, func(m jetstream.Msg, meta *jetstream.MsgMetadata) error {
		seq := meta.Sequence.Stream
		if seq > to {
			return errHeadersDone
		}
		size, err := strconv.Atoi(m.Headers().Get(nats.MsgSize))
		if err != nil || size < 0 {
			return fmt.Errorf("seq %d: no size in its headers (Nats-Msg-Size %q)", seq, m.Headers().Get(nats.MsgSize))
		}
		return fn(seq, size)
	})
}
