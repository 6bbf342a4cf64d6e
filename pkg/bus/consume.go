package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
// in stream order. A message is acknowledged only after the handler
// returned for it.
type Handler func(Msg)

// Ingest feeds a durable consumer's messages to a handler, every stream
// sequence once and in order: when a delivery skips sequences (messages
// lost with a dropped connection), the skipped range is read from the
// stream and handled first, so no record is passed over. Nothing is
// acknowledged: the ingest's consumers have ack policy "none" (the server
// counts a message delivered once sent), since the stream, not the
// consumer, keeps every record for a newly pinned ingest to read.
//
// On a consumer with a priority group (the pinned_client policy), many
// instances pull and JetStream delivers to one of them, the pinned one.
// The server names the pin in each message (Nats-Pin-Id). The ingest
// tells its Pin hooks when it gains a pin (before the first record of a
// pin it did not hold) and when it gives it up (the server refused its
// pull with a wrong pin, the consumer's leader changed, its pulls get no
// heartbeat, its connection dropped: Lose); records of a pin the server
// refused are not handled.
type Ingest struct {
	// Logger receives read failures; StartIngest makes a nil one discard
	// them.
	Logger *slog.Logger

	consumer string // its name, for errors
	group    string // the priority group pulled in, "" for none
	cc       jetstream.ConsumeContext
	gaps     gapFiller
	hooks    Pin

	pullBytes int // the max_bytes of a pull

	// track, on a partition's consumer, spares the gap filler its reads
	// of the records that are not the partition's (TrackDeliveries).
	track *deliveryTrack

	mu      sync.Mutex
	pin     string // the pin held, "" when none
	prev    string // the pin last held, until the server refuses it
	lostPin string // the last pin lost to a refused pull
}

// Pin are the hooks of an ingest on a consumer with a priority group.
type Pin struct {
	// Gained is called on the ingest's goroutine before the first record
	// of a pin not held is handled; first is that record's stream
	// sequence: every record before it is stored. resumed says the pin
	// is the one held last, given up for a lost heartbeat or connection
	// and not refused since: no other instance was pinned meanwhile, and
	// the records handled before follow on (the gap filler goes on from
	// the last, reading any the connection lost). Otherwise the gap
	// filler starts over at first.
	Gained func(pin string, first uint64, resumed bool)
	// Lost is called when the pin held is given up, from any goroutine,
	// with why; refused says the server refused it (another instance
	// holds the pin now), and its records are never handled again.
	// Gained may be called again later.
	Lost func(pin, reason string, refused bool)
}

// IngestOption adjusts StartIngest.
type IngestOption func(*Ingest)

// WithPin sets the hooks called when the ingest gains or loses the
// consumer's pin.
func WithPin(p Pin) IngestOption { return func(in *Ingest) { in.hooks = p } }

// WithPullBytes sets the most bytes one pull asks for (see PullBytes:
// more than the server's max_pending gets ctxd cut off as a slow
// consumer). Without it a pull asks for at most 1 MiB and room for the
// headers, which fits a server with default limits.
func WithPullBytes(n int) IngestOption { return func(in *Ingest) { in.pullBytes = n } }

// TrackDeliveries tells the ingest's gap filler, on the consumer of one
// partition of a stream, when a delivery skipped none of the partition's
// records: a partition's records are far apart in the stream, so each
// delivery skips stream sequences, and reading them all back would cost
// a read per record. The consumer's delivery sequence says instead: the
// server delivers a consumer's new records in stream order, each with the
// next delivery sequence, so a record delivered right after the previous
// one seen, under the same pin, skipped none of the partition's; the
// range is then not read. Any other delivery is read as without it.
func TrackDeliveries() IngestOption { return func(in *Ingest) { in.track = &deliveryTrack{} } }

// PullExpiry is how long each pull of the ingest waits on the server. A
// pinned ingest's pulls keep its pin: the consumer's pinned TTL must be
// well above it (ctxd.consumer.json: 3 s).
const PullExpiry = time.Second

// StartIngest starts consuming. after is the last stream sequence already
// handled (the consumer may deliver it and earlier ones again: they are
// passed to h once more, which must ignore what it has seen); readRange
// reads skipped sequences from the stream, and must not stop short of
// the range's end, as ReadRange does not: a replica behind the consumer's
// would otherwise have records passed over. On a consumer with priority
// groups it pulls in the first. A consumer that takes acks (an earlier
// ctxd's, which EnsureConsumer replaces) is refused. Close stops it.
func StartIngest(cons jetstream.Consumer, after uint64, readRange func(from, to uint64, fn func(Msg) error) error, h Handler, logger *slog.Logger, opts ...IngestOption) (*Ingest, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	info := cons.CachedInfo()
	if p := info.Config.AckPolicy; p != jetstream.AckNonePolicy {
		return nil, fmt.Errorf("consumer %s takes acks (ack policy %s): an ingest acknowledges nothing, and its consumer must have ack policy none", info.Name, p)
	}
	in := &Ingest{Logger: logger, consumer: info.Name, pullBytes: defaultPullBytes}
	for _, o := range opts {
		o(in)
	}
	in.gaps = gapFiller{last: after, read: readRange, handle: h, track: in.track}
	pull := []jetstream.PullConsumeOpt{jetstream.PullMaxMessagesWithBytesLimit(1000, in.pullBytes), jetstream.ConsumeErrHandler(in.consumeError)}
	if groups := info.Config.PriorityGroups; len(groups) > 0 {
		in.group = groups[0]
		pull = append(pull, jetstream.PullPriorityGroup(in.group), jetstream.PullExpiry(PullExpiry))
	}
	cc, err := cons.Consume(in.receive, pull...)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: consume: %w", in.consumer, err)
	}
	in.cc = cc
	return in, nil
}

// receive handles one delivered message.
func (in *Ingest) receive(m jetstream.Msg) {
	seq, ok := streamSeq(m.Reply())
	var cseq uint64 // read only for the track
	if ok && in.track != nil {
		cseq, ok = consumerSeq(m.Reply())
	}
	if !ok {
		meta, err := m.Metadata()
		if err != nil {
			in.track.lose()
			in.Logger.Warn("message without JetStream metadata", "subject", m.Subject(), "err", err)
			return
		}
		seq, cseq = meta.Sequence.Stream, meta.Sequence.Consumer
	}
	pin := ""
	if in.group != "" || in.track != nil {
		pin = m.Headers().Get(pinHeader)
	}
	in.track.see(cseq, seq, pin)
	if in.group != "" {
		in.mu.Lock()
		held, lost := in.pin, in.lostPin
		in.mu.Unlock()
		switch {
		case pin == "" || pin == lost:
			return // delivered under a pin this ingest lost: its new holder has it
		case pin != held:
			in.mu.Lock()
			resumed := pin == in.prev
			in.pin, in.prev = pin, pin
			in.mu.Unlock()
			if !resumed {
				in.gaps.last = seq - 1
			}
			if in.hooks.Gained != nil {
				in.hooks.Gained(pin, seq, resumed)
			}
		}
	}
	if err := in.gaps.deliver(Msg{Subject: m.Subject(), Seq: seq, Data: m.Data()}); err != nil {
		// The next message's gap holds it, and is read then.
		in.Logger.Warn("skipped records could not be read; the next record's gap reads them again", "seq", seq, "err", err)
	}
}

// ReasonConsumerDeleted is the reason Pin.Lost gives when the consumer
// was deleted under the ingest: no record comes any more.
const ReasonConsumerDeleted = "consumer deleted"

// pinHeader names the pin a message was delivered under.
const pinHeader = "Nats-Pin-Id"

// consumeError is the consumer's error handler: some errors say the pin
// is lost.
func (in *Ingest) consumeError(_ jetstream.ConsumeContext, err error) {
	var reason string
	switch {
	case errors.Is(err, jetstream.ErrPinIDMismatch):
		reason = "pin id mismatch"
	case errors.Is(err, jetstream.ErrConsumerLeadershipChanged):
		reason = "consumer leader changed"
	case errors.Is(err, jetstream.ErrNoHeartbeat):
		reason = "no heartbeat"
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
		reason = ReasonConsumerDeleted
	}
	if reason != "no heartbeat" {
		in.Logger.Warn("consume", "consumer", in.consumer, "err", err)
	}
	if reason != "" {
		in.Lose(reason, errors.Is(err, jetstream.ErrPinIDMismatch))
	}
}

// Lose gives up the pin held, if any: the records of that pin delivered
// from now on are not handled. refused says the server refused the pin:
// its records are never handled again, whereas a pin given up for a lost
// heartbeat or connection is taken again as new when its records come.
func (in *Ingest) Lose(reason string, refused bool) {
	in.mu.Lock()
	pin := in.pin
	in.pin = ""
	if refused {
		if pin == "" {
			pin = in.prev // given up before, refused now
		}
		if pin != "" {
			in.lostPin = pin
		}
		in.prev = ""
	}
	in.mu.Unlock()
	if pin != "" && in.hooks.Lost != nil {
		in.hooks.Lost(pin, reason, refused)
	}
}

// Pinned returns the pin the ingest holds, "" when none.
func (in *Ingest) Pinned() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.pin
}

// gapFiller hands messages on in stream order, reading the sequences a
// delivery skipped.
type gapFiller struct {
	last   uint64 // highest stream sequence handled
	read   func(from, to uint64, fn func(Msg) error) error
	handle Handler
	track  *deliveryTrack // nil: every gap is read
}

func (g *gapFiller) deliver(m Msg) error {
	if m.Seq > g.last+1 && g.read != nil && !g.track.nothingBetween(g.last+1, m.Seq-1) {
		err := g.read(g.last+1, m.Seq-1, func(skipped Msg) error {
			g.handle(skipped)
			g.last = max(g.last, skipped.Seq)
			return nil
		})
		if err != nil {
			return err
		}
		g.track.read()
	}
	g.handle(m)
	g.last = max(g.last, m.Seq)
	return nil
}

// deliveryTrack follows a consumer's delivery sequences for
// TrackDeliveries. Messages are received one at a time, on one goroutine;
// a nil track tracks nothing.
type deliveryTrack struct {
	prevC, prevS uint64 // delivery and stream sequences of the previous message
	prevPin      string
	contig       bool   // the current message came right after the previous one
	before, cur  uint64 // the previous and current messages' stream sequences
	hole         bool   // a delivery was missed since the last read
}

// see notes a delivered message: its delivery and stream sequences and
// its pin.
func (t *deliveryTrack) see(c, s uint64, pin string) {
	if t == nil {
		return
	}
	t.contig = t.prevC != 0 && c == t.prevC+1 && pin != "" && pin == t.prevPin
	if !t.contig {
		t.hole = true
	}
	t.before, t.cur = t.prevS, s
	t.prevC, t.prevS, t.prevPin = c, s, pin
}

// lose notes a message whose sequences are unknown.
func (t *deliveryTrack) lose() {
	if t != nil {
		t.contig, t.hole = false, true
	}
}

// read notes that the gap filler read what the deliveries skipped.
func (t *deliveryTrack) read() {
	if t != nil {
		t.hole = false
	}
}

// nothingBetween reports whether the gap filler's read of [from, to],
// up to the current message, can be skipped: the current message came
// right after the previous one, which was handled, and no delivery was
// missed since the last read.
func (t *deliveryTrack) nothingBetween(from, to uint64) bool {
	return t != nil && t.contig && !t.hole && from > t.before && to+1 == t.cur
}

// Close drains the consumer: the message in hand is finished and nothing
// more is taken. It waits until that is done.
func (in *Ingest) Close() error {
	in.cc.Drain()
	var err error
	select {
	case <-in.cc.Closed():
	case <-time.After(10 * time.Second):
		in.cc.Stop()
		err = fmt.Errorf("consumer %s: drain did not finish in 10s", in.consumer)
	}
	return err
}

// Replay reads the stream from sequence from on, with an ordered
// consumer, and calls h for every message until it has caught up with the
// end of the stream as it was when Replay started. It returns the number
// of messages read and the last sequence seen.
//
// The end comes from the stream leader. The consumer reads from one
// replica, which may be behind it: when the consumer has nothing more
// before the end, the rest is read with ReadRange, which the replicas
// must prove or the leader completes.
//
// A cluster that has lost its leaders (a node fault) is waited for: the
// stream's information and the consumer are asked for again, for up to
// a minute, within ctx.
func Replay(ctx context.Context, js jetstream.JetStream, stream string, from uint64, h Handler) (n int, last uint64, err error) {
	st, err := lookUp(ctx, js, stream)
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
	// rest reads what the consumer's replica did not have, if anything.
	rest := func(from uint64) (int, uint64, error) {
		err := ReadRange(ctx, js.Conn(), stream, from, end, func(m Msg) error {
			h(m)
			n++
			last = m.Seq
			return nil
		})
		return n, last, err
	}
	var cons jetstream.Consumer
	err = retryAPI(ctx, func(ctx context.Context) (err error) {
		cons, err = js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:   from,
		})
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("stream %s: replay: %w", stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2000))
	if err != nil {
		return 0, 0, fmt.Errorf("stream %s: replay: %w", stream, err)
	}
	defer it.Stop()
	// The records from `from` to the end may all be deleted: then there is
	// nothing to read, and waiting for one would wait for a new record.
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		return rest(from)
	}
	for {
		if err := ctx.Err(); err != nil {
			return n, last, err
		}
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return n, last, fmt.Errorf("stream %s: replay: %w", stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return n, last, fmt.Errorf("stream %s: replay: %w", stream, err)
		}
		last = meta.Sequence.Stream
		h(Msg{Subject: m.Subject(), Seq: last, Data: m.Data()})
		n++
		if last >= end {
			return n, last, nil
		}
		if meta.NumPending == 0 {
			return rest(last + 1)
		}
	}
}
