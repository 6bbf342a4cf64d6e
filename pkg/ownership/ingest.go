package ownership

import (
	"context"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
)

// OpenIngest makes the ingest of a stream whose last sequence is last:
// every partition's consumer (an unpartitioned stream's one consumer, its
// one partition) is made if missing, to start after last (every record up
// to it is stored: loads read it), and the balancer that pulls from them.
// Balance starts it.
func (r *Roles) OpenIngest(ctx context.Context, last uint64) error {
	for _, p := range r.parts {
		p.floor.Store(last)
	}
	cons := &StreamConsumers{Stream: r.cfg.Stream, Conn: r.cfg.Conn, Layout: r.layout, After: last,
		Life: r.cfg.Life, Logger: r.cfg.Logger}
	if err := cons.Open(ctx, r.cfg.Retry); err != nil {
		return err
	}
	var peers Peers = alone{}
	if r.layout.Partitioned() {
		peers = &NATSPeers{Conn: r.cfg.Conn, Stream: r.layout.Stream, Partitions: len(r.parts), Logger: r.cfg.Logger}
	}
	r.bal = newBalancer(r, cons, peers)
	return nil
}

// handler returns the handler of partition p's records: on an
// unpartitioned stream, handle.
func (r *Roles) handler(p *part) bus.Handler {
	if !r.layout.Partitioned() {
		return r.handle
	}
	return r.handlePart(p)
}

// Balance starts the balancer OpenIngest made: the instance pulls from
// the partitions as ceil(P / live instances) allows (from an
// unpartitioned stream's consumer, always), and router, on a partitioned
// stream, serves the endpoints of those it holds. The service exists
// before any partition is gained: it serves the partition endpoints of
// those gained before it opens once it does.
func (r *Roles) Balance(router Router) {
	if r.bal == nil {
		return
	}
	if r.layout.Partitioned() {
		r.router = router
	}
	r.bal.start()
}

// Partitioned reports whether the stream has several partitions.
func (r *Roles) Partitioned() bool { return r.layout.Partitioned() }

// HandBack hands every partition held back at once and stops pulling
// (the other instances told, the pins given back); it returns the
// partitions' ingest stores, whose checkpoints and snapshots are the
// caller's to write. No follower starts after it: requests in hand are
// answered by the one running, if any, or through the stream.
func (r *Roles) HandBack() []*store.Store {
	r.follow.noMore()
	if r.bal == nil || !r.handedBack.CompareAndSwap(false, true) {
		return nil
	}
	return r.bal.close()
}

// Disconnected gives the pins held up while the connection is down:
// until records of a pin come again (its ingest then reads what the
// connection lost), or another pin's, the partition's ingest store is
// not trusted, and requests read the stream.
func (r *Roles) Disconnected() {
	if b := r.bal; b != nil {
		b.disconnected()
	}
}
