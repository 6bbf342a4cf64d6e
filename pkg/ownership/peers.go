package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// Consumers is what the balancer needs of the partitions' consumers.
type Consumers interface {
	// Pull starts pulling from partition k's consumer: its records go
	// to h, and pin hears when this instance gains or loses its pin.
	Pull(k int, h bus.Handler, pin bus.Pin) (Run, error)
	// Unpin gives partition k's pin back: pin's only, when the server
	// says it holds it; with pin "", whoever's.
	Unpin(ctx context.Context, k int, pin string) error
	// Deleted reports whether partition k's consumer was deleted.
	Deleted(ctx context.Context, k int) bool
}

// Run is a partition's ingest under way (a *bus.Ingest).
type Run interface {
	// Pinned returns the pin the ingest holds, "" when none.
	Pinned() string
	// Close stops pulling; the record in hand is handled first.
	Close() error
	// Lose gives the pin up (see bus.Ingest.Lose).
	Lose(reason string, refused bool)
}

// Peers is how the balancer counts the other instances on the stream
// and tells them of the partitions it hands back.
type Peers interface {
	// Live returns the live instances on the stream, by service id with
	// their instance names, this one included once its service answers.
	Live() map[string]string
	// Announce tells the others which partitions this instance hands
	// back as it stops.
	Announce(h Handback) error
	// Listen calls fn with the handbacks the instances announce, of this
	// stream and its partitions only, until stop.
	Listen(fn func(Handback)) (stop func(), err error)
}

// StreamConsumers are the ingest consumers of a stream, over package
// bus: one a partition, or the stream's own (streams.IngestName) as the
// one partition of an unpartitioned stream.
type StreamConsumers struct {
	Stream *bus.Stream
	Conn   *nats.Conn
	Layout bus.Layout
	// After is the stream's last sequence at start: a missing consumer
	// starts after it, and the ingests' gap fillers go on from it.
	After  uint64
	Life   context.Context // bounds the reads of skipped records
	Logger *slog.Logger

	cons []*bus.Consumer // by partition, as Open found or made them
}

// Open creates the partitions' consumers that are missing, each to
// start after After, every request run by retry.
func (c *StreamConsumers) Open(ctx context.Context, retry func(ctx context.Context, what string, fn func(ctx context.Context) error) error) error {
	c.cons = make([]*bus.Consumer, max(1, c.Layout.P))
	for k := range c.cons {
		cfg, err := streams.PartitionIngest(k)
		if !c.Layout.Partitioned() {
			cfg, err = streams.Ingest()
		}
		if err != nil {
			return err
		}
		err = retry(ctx, "consumer "+cfg.Durable, func(ctx context.Context) error {
			c.cons[k], err = c.Stream.OpenConsumer(ctx, cfg, c.After)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Pull pulls from the consumer Open found: a partition handed back waits
// for no lookup. Its gap filler reads what a delivery skipped: of the
// partition's records only; on an unpartitioned stream, whose records
// follow on one from the next, every record skipped.
func (c *StreamConsumers) Pull(k int, h bus.Handler, pin bus.Pin) (Run, error) {
	nc, stream := c.Conn, c.Layout.Stream
	logger := c.Logger
	opts := []bus.IngestOption{bus.WithPin(pin)}
	if c.Layout.Partitioned() {
		logger = logger.With("partition", k)
		opts = append(opts, bus.TrackDeliveries())
	}
	readRange := func(from, to uint64, fn func(bus.Msg) error) error {
		ctx, cancel := context.WithTimeout(c.Life, 30*time.Second)
		defer cancel()
		if c.Layout.Partitioned() {
			return bus.ReadPartition(ctx, nc, stream, k, from, to, to+1, fn)
		}
		return bus.ReadRange(ctx, nc, stream, from, to, fn)
	}
	in, err := c.cons[k].StartIngest(c.After, readRange, h, logger, opts...)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// Unpin gives partition k's pin back (bus.Stream.Unpin).
func (c *StreamConsumers) Unpin(ctx context.Context, k int, pin string) error {
	return c.Stream.Unpin(ctx, ConsumerName(c.Layout, k), streams.IngestGroup, pin)
}

// Deleted reports whether partition k's consumer was deleted.
func (c *StreamConsumers) Deleted(ctx context.Context, k int) bool {
	return c.Stream.ConsumerDeleted(ctx, ConsumerName(c.Layout, k))
}

// ConsumerName is the name of partition k's ingest consumer: the
// stream's own when it is unpartitioned.
func ConsumerName(l bus.Layout, k int) string {
	if !l.Partitioned() {
		return streams.IngestName
	}
	return streams.PartitionName(k)
}

// alone are the peers of the one partition of an unpartitioned stream:
// however many instances run, each holds at most the one, and pulls from
// it while it does not, so there is nobody to count or tell.
type alone struct{}

func (alone) Live() map[string]string                        { return nil }
func (alone) Announce(Handback) error                        { return nil }
func (alone) Listen(func(Handback)) (stop func(), err error) { return func() {}, nil }

// NATSPeers are the instances on a stream as NATS shows them: the ctxd
// services that answer $SRV.PING with the stream's partitions, and the
// notices on HandbackSubject.
type NATSPeers struct {
	Conn       *nats.Conn
	Stream     string
	Partitions int
	Logger     *slog.Logger
}

// Announce publishes h on HandbackSubject.
func (n *NATSPeers) Announce(h Handback) error {
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return n.Conn.Publish(HandbackSubject, data)
}

// Listen subscribes to HandbackSubject; a notice that does not decode,
// or is of another stream or number of partitions, is ignored.
func (n *NATSPeers) Listen(fn func(Handback)) (func(), error) {
	sub, err := n.Conn.Subscribe(HandbackSubject, func(m *nats.Msg) {
		h, err := decodeHandback(m.Data, n.Stream, n.Partitions)
		if err != nil {
			n.Logger.Debug("partition handback ignored", "err", err)
			return
		}
		fn(h)
	})
	if err != nil {
		return nil, err
	}
	return func() { sub.Unsubscribe() }, nil
}

// Live returns the ctxd instances on the stream, by service id with
// their instance names: the services named ctxd that answer $SRV.PING
// with this stream's partitions.
func (n *NATSPeers) Live() map[string]string {
	ids := map[string]string{}
	nc := n.Conn
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return ids
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.PING.ctxd", inbox, nil); err != nil {
		return ids
	}
	want := strconv.Itoa(n.Partitions)
	deadline := time.Now().Add(time.Second)
	wait := 250 * time.Millisecond // for the first reply
	for time.Now().Before(deadline) {
		m, err := sub.NextMsg(wait)
		if err != nil {
			break
		}
		wait = 50 * time.Millisecond // for more
		var ping struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		}
		if json.Unmarshal(m.Data, &ping) == nil && ping.ID != "" && ping.Metadata["partitions"] == want {
			ids[ping.ID] = ping.Metadata["instance"]
		}
	}
	return ids
}

// decodeHandback decodes a notice of stream's partitions; one of another
// stream or number of partitions, or naming a partition the stream does
// not have, is an error.
func decodeHandback(data []byte, stream string, P int) (Handback, error) {
	var h Handback
	if err := json.Unmarshal(data, &h); err != nil {
		return Handback{}, fmt.Errorf("handback: %w", err)
	}
	switch {
	case h.Stream != stream || h.Partitions != P:
		return Handback{}, fmt.Errorf("handback: of stream %q with %d partitions, not %q with %d", h.Stream, h.Partitions, stream, P)
	case h.Instance == "":
		return Handback{}, errors.New("handback: no instance")
	case len(h.HandedBack) > P:
		return Handback{}, fmt.Errorf("handback: %d partitions of %d", len(h.HandedBack), P)
	}
	for _, k := range h.HandedBack {
		if k < 0 || k >= P {
			return Handback{}, fmt.Errorf("handback: no partition %d of %d", k, P)
		}
	}
	return h, nil
}
