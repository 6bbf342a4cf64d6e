package bus

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SubjectState is what a stream holds of one subject: how many messages,
// and the stream sequence and size of the last.
type SubjectState struct {
	Subject  string
	Messages uint64
	Last     uint64
	LastSize int
}

// Subjects lists the subjects of stream that match filter (a subject
// with wildcards, such as "transcripts.>"), with their message counts
// from the stream's info and their last messages from an ordered
// consumer that delivers the last message of each subject, headers only:
// however large the records, only their headers travel.
//
// A subject that gets a message while the two are read may show a count
// that does not include its last message, or the reverse; the list is a
// view for people, not a position to read from.
func Subjects(ctx context.Context, js jetstream.JetStream, stream, filter string) ([]SubjectState, error) {
	return SubjectsSince(ctx, js, stream, filter, nil)
}

// SubjectsSince lists the subjects as Subjects does, and takes the last
// message of a subject from before (a list Subjects or SubjectsSince
// returned) while the stream counts as many messages of it as before:
// the server loads the last message of the subjects that moved only, not
// of every subject. A subject whose messages were removed and as many
// stored since keeps the last it had before; the list is a view for
// people.
func SubjectsSince(ctx context.Context, js jetstream.JetStream, stream, filter string, before []SubjectState) ([]SubjectState, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := leaderInfo(ctx, st, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	if len(info.State.Subjects) == 0 {
		return nil, nil
	}
	prev := make(map[string]SubjectState, len(before))
	for _, b := range before {
		prev[b.Subject] = b
	}
	byName := make(map[string]int, len(info.State.Subjects))
	out := make([]SubjectState, 0, len(info.State.Subjects))
	var moved []string
	for subj, n := range info.State.Subjects {
		byName[subj] = len(out)
		if p, ok := prev[subj]; ok && p.Messages == n && p.Last != 0 {
			out = append(out, p)
			continue
		}
		out = append(out, SubjectState{Subject: subj, Messages: n})
		moved = append(moved, subj)
	}
	if len(moved) == 0 {
		return out, nil
	}
	filters := moved
	if len(moved) > maxSubjectFilters {
		filters = []string{filter}
	}
	err = readHeaders(ctx, js, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	}, func(m jetstream.Msg, meta *jetstream.MsgMetadata) error {
		i, ok := byName[m.Subject()]
		if !ok {
			// New since the info: listed without a count.
			i = len(out)
			byName[m.Subject()] = i
			out = append(out, SubjectState{Subject: m.Subject()})
		}
		out[i].Last = meta.Sequence.Stream
		out[i].LastSize, _ = strconv.Atoi(m.Headers().Get(nats.MsgSize))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	return out, nil
}

// maxSubjectFilters is how many subjects that moved SubjectsSince names
// to the consumer; past it, the filter: every subject's last is loaded.
const maxSubjectFilters = 64

// ListSubjects is SubjectsSince over a connection, for a caller that
// holds no JetStream handle.
func ListSubjects(ctx context.Context, nc *nats.Conn, stream, filter string, before []SubjectState) ([]SubjectState, error) {
	js, err := JetStream(nc)
	if err != nil {
		return nil, err
	}
	return SubjectsSince(ctx, js, stream, filter, before)
}
