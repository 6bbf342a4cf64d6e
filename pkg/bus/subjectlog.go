package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamFor returns the stream that stores subject.
func StreamFor(ctx context.Context, js jetstream.JetStream, subject string) (jetstream.Stream, error) {
	name, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("no stream stores %s: %w", subject, err)
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	return st, nil
}

// SubjectLog is what a stream holds of one subject, as a publisher that
// appends to it needs to know: the ids of its messages and its last
// sequence, and the stream's largest message.
type SubjectLog struct {
	Stream string
	// IDs holds the Nats-Msg-Id of every message on the subject, in
	// stream order ("" for a message without one).
	IDs []string
	// Last is the stream sequence of the subject's last message; 0 when
	// it holds none.
	Last uint64
	// MaxMsgSize is the largest message the stream stores, headers
	// included; 0 or less for no limit of the stream's own.
	MaxMsgSize int64
}

// ReadSubjectLog reads the ids of the messages on subject in st with an
// ordered consumer that delivers headers only: however large the records,
// only their headers travel.
func ReadSubjectLog(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, subject string) (*SubjectLog, error) {
	stream := st.CachedInfo().Config.Name
	info, err := leaderInfo(ctx, st, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	log := &SubjectLog{Stream: stream, MaxMsgSize: int64(info.Config.MaxMsgSize)}
	if info.State.Subjects[subject] == 0 {
		return log, nil
	}
	if err := log.read(ctx, js, subject); err != nil {
		return nil, fmt.Errorf("stream %s: read %s: %w", stream, subject, err)
	}
	return log, nil
}

func (l *SubjectLog) read(ctx context.Context, js jetstream.JetStream, subject string) error {
	return readHeaders(ctx, js, l.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}, func(m jetstream.Msg, meta *jetstream.MsgMetadata) error {
		l.IDs = append(l.IDs, m.Headers().Get(jetstream.MsgIDHeader))
		l.Last = max(l.Last, meta.Sequence.Stream)
		return nil
	})
}
