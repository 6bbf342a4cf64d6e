package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Follower reads a whole stream along as it is written, with an ordered
// consumer: every message from a start on, in stream order, none skipped.
// The consumer is ephemeral and in memory on one server; when its
// deliveries skip (a lost message, a dropped connection, a server gone)
// or stop (no heartbeat), nats.go makes a new one that starts after the
// last message handled. It acknowledges nothing and holds no pin, so any
// number of instances follow beside the ingest.
type Follower struct {
	cc jetstream.ConsumeContext

	mu      sync.Mutex // held while the handler runs
	stopped bool
	last    atomic.Uint64 // the last stream sequence handled
}

// Bounds of a Follower's pulls. A pull's heartbeats tell within about
// two of them that its consumer's server stopped answering: the
// consumer is then made again.
const (
	followExpiry    = 5 * time.Second
	followHeartbeat = 2 * time.Second
	// followInactive is how long the server keeps a follower's consumer
	// that nobody pulls from: one whose instance died goes within it.
	followInactive = 30 * time.Second
)

// Follow starts reading stream after sequence after (every message
// before it is the caller's to read otherwise) and calls h for each
// message, one at a time, in stream order; the sequences between two
// calls hold no message. Stop ends it. The pulls ask for at most
// pullBytes each (see PullBytes; 0 for the default).
func Follow(ctx context.Context, js jetstream.JetStream, stream string, after uint64, pullBytes int, h Handler, logger *slog.Logger) (*Follower, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if pullBytes <= 0 {
		pullBytes = defaultPullBytes
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       after + 1,
		InactiveThreshold: followInactive,
	})
	if err != nil {
		return nil, fmt.Errorf("stream %s: follow: %w", stream, err)
	}
	f := &Follower{}
	f.last.Store(after)
	receive := func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			logger.Warn("follower: message without JetStream metadata", "subject", m.Subject(), "err", err)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		seq := meta.Sequence.Stream
		if f.stopped || seq <= f.last.Load() {
			return
		}
		h(Msg{Subject: m.Subject(), Seq: seq, Data: m.Data()})
		f.last.Store(seq)
	}
	onErr := func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrConnectionClosed) {
			logger.Debug("follower", "stream", stream, "err", err)
			return
		}
		logger.Warn("follower: reads again from where it was", "stream", stream, "err", err)
	}
	f.cc, err = cons.Consume(receive, jetstream.PullMaxMessagesWithBytesLimit(1000, pullBytes),
		jetstream.PullExpiry(followExpiry), jetstream.PullHeartbeat(followHeartbeat), jetstream.ConsumeErrHandler(onErr))
	if err != nil {
		return nil, fmt.Errorf("stream %s: follow: %w", stream, err)
	}
	return f, nil
}

// Last returns the last stream sequence handled (the start's after
// before any).
func (f *Follower) Last() uint64 { return f.last.Load() }

// Stop stops the reads. When it returns the handler is not running and
// is not called again.
func (f *Follower) Stop() {
	f.cc.Stop()
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
}
