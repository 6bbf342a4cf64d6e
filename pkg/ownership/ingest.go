package ownership

import (
	"context"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/streams"
)

// OpenIngest starts the ingest of an unpartitioned stream whose last
// sequence is last: its consumer is made if missing, to start after the
// records the stream holds now. Every instance pulls; JetStream delivers
// to the pinned one, which then makes its ingest store (Gained). A
// partitioned stream's ingests are the balancer's (OpenPartitions).
func (r *Roles) OpenIngest(ctx context.Context, last uint64) error {
	ccfg, err := streams.Ingest()
	if err != nil {
		return err
	}
	var cons *bus.Consumer
	err = r.cfg.Retry(ctx, "consumer "+ccfg.Durable, func(ctx context.Context) error {
		cons, err = r.cfg.Stream.OpenConsumer(ctx, ccfg, last)
		return err
	})
	if err != nil {
		return err
	}
	nc, stream := r.cfg.Conn, r.layout.Stream
	readRange := func(from, to uint64, fn func(bus.Msg) error) error {
		ctx, cancel := context.WithTimeout(r.cfg.Life, 30*time.Second)
		defer cancel()
		return bus.ReadRange(ctx, nc, stream, from, to, fn)
	}
	pin := bus.WithPin(bus.Pin{Gained: r.Gained, Lost: func(_, reason string, refused bool) {
		r.Lost(reason, refused)
		if reason == bus.ReasonConsumerDeleted {
			// Nothing is delivered any more, to any instance: stop loudly,
			// so that a supervisor starts ctxd again, which creates it.
			r.fail(fmt.Errorf("ingest consumer %s on stream %s was deleted: no record is applied any more; start ctxd again to create it", streams.IngestName, stream))
		}
	}})
	in, err := cons.StartIngest(last, readRange, r.Handle, r.cfg.Logger, pin)
	if err != nil {
		return err
	}
	r.ingest.Store(in)
	return nil
}

// Disconnected gives the unpartitioned stream's pin up while the
// connection is down: until records of the pin come again (the ingest
// then reads what the connection lost), or another pin's, the ingest
// store is not trusted, and requests read the stream.
func (r *Roles) Disconnected() {
	if in := r.ingest.Load(); in != nil {
		in.Lose("nats disconnected", false)
	}
}

// StopIngest stops the unpartitioned stream's ingest, if one runs (the
// record in hand is applied). owner is the store it fed, if any: its
// checkpoints and snapshots are the caller's to write, then its pin to
// give back (Unpin) and Lost. It is read once the ingest has stopped:
// a pin gained while it stopped makes a store, which is the caller's
// to close too.
func (r *Roles) StopIngest() (owner *store.Store, err error) {
	in := r.ingest.Swap(nil)
	if in == nil {
		return nil, nil
	}
	err = in.Close()
	return r.Feeding(), err
}

// Unpin gives up the unpartitioned stream's pin, when the server says
// this instance holds it, so that another instance ingests at once
// instead of after the pinned TTL.
func (r *Roles) Unpin(ctx context.Context) {
	pin := r.HeldPin()
	if pin == "" {
		return
	}
	if err := r.cfg.Stream.Unpin(ctx, streams.IngestName, streams.IngestGroup, pin); err != nil {
		r.cfg.Logger.Warn("unpin the ingest consumer", "err", err)
	}
}
