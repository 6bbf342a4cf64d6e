package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SetUp creates the stream of the definition want when it is missing and
// checks it (CheckStream, with opts) when it exists, and returns its
// handle: what ctxd's runtime holds instead of JetStream's.
func SetUp(ctx context.Context, nc *nats.Conn, want jetstream.StreamConfig, opts ...CheckOption) (*Stream, error) {
	js, err := JetStream(nc)
	if err != nil {
		return nil, err
	}
	st, err := EnsureStream(ctx, js, want, opts...)
	if err != nil {
		return nil, err
	}
	return &Stream{nc: nc, js: js, name: want.Name, st: st}, nil
}

// FindStream returns the handle of the stream that stores subj, as it is
// now.
func FindStream(ctx context.Context, nc *nats.Conn, subj string) (*Stream, error) {
	js, err := JetStream(nc)
	if err != nil {
		return nil, err
	}
	st, err := StreamFor(ctx, js, subj)
	if err != nil {
		return nil, err
	}
	return &Stream{nc: nc, js: js, name: st.CachedInfo().Config.Name, st: st}, nil
}

// Replicas returns the stream's replicas, as they were when the handle
// was made.
func (s *Stream) Replicas() int { return s.st.CachedInfo().Config.Replicas }

// Layout returns the stream's partitions, as they were when the handle
// was made (see LayoutOf).
func (s *Stream) Layout() (Layout, error) { return LayoutOf(s.st.CachedInfo().Config) }

// Identity returns the stream's identity (StreamIdentity): a stream
// deleted and created again under its name has another.
func (s *Stream) Identity() string { return StreamIdentity(s.st.CachedInfo()) }

// AllowsMsgTTL reports whether the stream lets a message carry its own
// time to live: records then leave it of their own accord.
func (s *Stream) AllowsMsgTTL() bool { return s.st.CachedInfo().Config.AllowMsgTTL }

// State returns the stream's last sequence and the number of records it
// holds, as the server says now.
func (s *Stream) State(ctx context.Context) (last, msgs uint64, err error) {
	return LastSeq(ctx, s.st)
}

// ReadLayout reads the stream's partitions as the server says now; ok is
// false when the stream is gone (its consumers and checkpoints say so).
func (s *Stream) ReadLayout(ctx context.Context) (l Layout, ok bool, err error) {
	info, err := s.st.Info(ctx)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return Layout{}, false, nil
	}
	if err != nil {
		return Layout{}, false, fmt.Errorf("stream %s: %w", s.name, err)
	}
	l, err = LayoutOf(info.Config)
	return l, true, err
}

// CheckpointBucket opens the checkpoint bucket (OpenCheckpoints) with
// replicas, for this stream: its checkpoints name the stream's identity.
func (s *Stream) CheckpointBucket(ctx context.Context, replicas int) (*Checkpoints, error) {
	cps, err := OpenCheckpoints(ctx, s.js, replicas)
	if err != nil {
		return nil, err
	}
	cps.Stream = s.Identity()
	return cps, nil
}

// SnapshotBucket opens the snapshot bucket (OpenSnapshots) with replicas.
func (s *Stream) SnapshotBucket(ctx context.Context, replicas int) (*Snapshots, error) {
	return OpenSnapshots(ctx, s.js, replicas)
}

// Append appends records to a subject of the stream (see the function
// Append).
func (s *Stream) Append(ctx context.Context, r AppendRecords) (Appended, error) {
	return Append(ctx, s.js, r)
}

// ReadSubjectLog reads the ids of the messages on subj (see the function
// ReadSubjectLog).
func (s *Stream) ReadSubjectLog(ctx context.Context, subj string) (*SubjectLog, error) {
	return ReadSubjectLog(ctx, s.js, s.st, subj)
}

// Follow reads the stream along as it is written (see the function
// Follow).
func (s *Stream) Follow(ctx context.Context, after uint64, pullBytes int, h Handler, logger *slog.Logger) (*Follower, error) {
	return Follow(ctx, s.js, s.name, after, pullBytes, h, logger)
}

// Consumer is a durable consumer of the stream, opened for an Ingest.
type Consumer struct {
	s *Stream
	c jetstream.Consumer
}

// OpenConsumer opens the durable consumer of the definition cfg for an
// Ingest (see the function OpenConsumer): a missing one starts after
// sequence after.
func (s *Stream) OpenConsumer(ctx context.Context, cfg jetstream.ConsumerConfig, after uint64) (*Consumer, error) {
	c, err := OpenConsumer(ctx, s.st, cfg, after)
	if err != nil {
		return nil, err
	}
	return &Consumer{s: s, c: c}, nil
}

// Name returns the consumer's name.
func (c *Consumer) Name() string { return c.c.CachedInfo().Name }

// StartIngest starts feeding the consumer's records to h (see the
// function StartIngest). The ingest's pulls ask for what fits the
// connection's server (PullBytes) unless an option says otherwise.
func (c *Consumer) StartIngest(after uint64, readRange func(from, to uint64, fn func(Msg) error) error, h Handler, logger *slog.Logger, opts ...IngestOption) (*Ingest, error) {
	opts = append([]IngestOption{WithPullBytes(PullBytes(c.s.nc))}, opts...)
	return StartIngest(c.c, after, readRange, h, logger, opts...)
}

// ConsumerDeleted reports whether the server says the consumer called
// name is not on the stream; a request that fails otherwise says
// nothing.
func (s *Stream) ConsumerDeleted(ctx context.Context, name string) bool {
	_, err := s.st.Consumer(ctx, name)
	return errors.Is(err, jetstream.ErrConsumerNotFound)
}

// Lag returns the records the consumers have not delivered yet, or
// delivered and not seen acknowledged, summed: how far behind the
// stream their ingests are.
func (s *Stream) Lag(ctx context.Context, names ...string) (uint64, error) {
	var behind uint64
	for _, name := range names {
		c, err := s.st.Consumer(ctx, name)
		if err != nil {
			return 0, fmt.Errorf("consumer %s: %w", name, err)
		}
		info := c.CachedInfo()
		behind += info.NumPending + uint64(info.NumAckPending)
	}
	return behind, nil
}

// Unpin gives back the pin of the consumer's priority group, so that
// another instance's waiting pull gets it at once instead of after the
// pinned TTL. With pin not "", only when the server says that pin holds
// it (the pin of this instance's ingest, not one another instance got
// since); with pin "", whoever holds it. A consumer gone when the pin
// is given back is no error: nothing holds its pin.
func (s *Stream) Unpin(ctx context.Context, consumer, group, pin string) error {
	if pin != "" {
		c, err := s.st.Consumer(ctx, consumer)
		if err != nil {
			return fmt.Errorf("consumer %s: %w", consumer, err)
		}
		held := false
		for _, g := range c.CachedInfo().PriorityGroups {
			held = held || g.Group == group && g.PinnedClientID == pin
		}
		if !held {
			return nil
		}
	}
	if err := s.st.UnpinConsumer(ctx, consumer, group); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("consumer %s: unpin: %w", consumer, err)
	}
	return nil
}
