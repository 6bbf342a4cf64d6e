package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Msg is one stored record as the handler sees it.
type Msg struct {
	Subject string
	Seq     uint64 // stream sequence
	Data    []byte
}

// Handler deals with one record. It is called for one message at a time,
// in stream order; the message is acknowledged when it returns.
type Handler func(Msg)

// Ingest feeds a durable consumer's messages to a handler.
type Ingest struct {
	// Logger receives ack failures; nil discards them.
	Logger *slog.Logger

	cc jetstream.ConsumeContext
}

// StartIngest starts consuming; Close stops it.
func StartIngest(cons jetstream.Consumer, h Handler, logger *slog.Logger) (*Ingest, error) {
	in := &Ingest{Logger: logger}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			in.logf("message without JetStream metadata", "subject", m.Subject(), "err", err)
			return
		}
		h(Msg{Subject: m.Subject(), Seq: meta.Sequence.Stream, Data: m.Data()})
		if err := m.Ack(); err != nil {
			in.logf("ack failed; the record will be redelivered and skipped", "seq", meta.Sequence.Stream, "err", err)
		}
	}, jetstream.PullMaxMessages(1000), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			in.logf("consume", "err", err)
		}
	}))
	if err != nil {
		return nil, fmt.Errorf("start ingest: %w", err)
	}
	in.cc = cc
	return in, nil
}

func (in *Ingest) logf(msg string, args ...any) {
	if in.Logger != nil {
		in.Logger.Warn(msg, args...)
	}
}

// Close drains the consumer: the message in hand is finished and
// acknowledged, nothing more is taken. It waits until that is done.
func (in *Ingest) Close() error {
	in.cc.Drain()
	select {
	case <-in.cc.Closed():
		return nil
	case <-time.After(10 * time.Second):
		in.cc.Stop()
		return errors.New("ingest: drain did not finish in 10s")
	}
}

// Replay reads the stream from sequence from on, with an ordered
// consumer, and calls h for every message until it has caught up with the
// end of the stream as it was when Replay started. It returns the number
// of messages read and the last sequence seen.
func Replay(ctx context.Context, js jetstream.JetStream, stream string, from uint64, h Handler) (n int, last uint64, err error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, fmt.Errorf("replay: %w", err)
	}
	end := st.CachedInfo().State.LastSeq
	if from == 0 {
		from = 1
	}
	if end < from || st.CachedInfo().State.Msgs == 0 {
		return 0, 0, nil
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   from,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("replay: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2000))
	if err != nil {
		return 0, 0, fmt.Errorf("replay: %w", err)
	}
	defer it.Stop()
	// The records from `from` to the end may all be deleted: then there is
	// nothing to read, and waiting for one would wait for a new record.
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		return 0, 0, nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return n, last, err
		}
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return n, last, fmt.Errorf("replay: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return n, last, fmt.Errorf("replay: %w", err)
		}
		last = meta.Sequence.Stream
		h(Msg{Subject: m.Subject(), Seq: last, Data: m.Data()})
		n++
		if last >= end || meta.NumPending == 0 {
			return n, last, nil
		}
	}
}
