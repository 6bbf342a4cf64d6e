package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/server"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// With P partitions every instance runs a balancer. JetStream pins each
// partition's consumer to one instance at a time (pinned_client): the pin
// is the ownership, nothing else is. The balancer only decides which
// consumers this instance pulls from:
//
//   - target = ceil(P / live instances), the live instances being the
//     ctxd services that answer $SRV.PING.ctxd with the same partitions;
//   - holding fewer than target, it pulls from every partition it does
//     not hold, as a standby: JetStream pins one of the waiting pulls
//     when a partition has no pin (its owner's pulls stopped for the
//     pinned TTL, or it was unpinned);
//   - holding target or more, it pulls only from those it holds;
//   - holding more than target for two rounds in a row, it hands the
//     surplus back: it stops trusting the partition's ingest store,
//     unpins the consumer (JetStream pins another waiting pull at once),
//     and stops pulling.
//
// Only the surplus moves. Correctness never depends on this: a request
// for a partition this instance does not hold is answered through the
// stream (roles.read), and an ingest store is trusted only while its pin
// is held (bus.Pin hooks).

// balanceEvery is how often the balancer counts the live instances and
// moves partitions.
const balanceEvery = 500 * time.Millisecond

// balancer runs the partitions' ingests of one instance.
type balancer struct {
	a     *App
	r     *roles
	after uint64 // the stream's last sequence at start

	mu     sync.Mutex
	runs   []*bus.Ingest // by partition; nil when not pulling
	over   int           // rounds in a row with more than target
	closed bool

	moved   atomic.Int64 // partitions handed back
	target  atomic.Int64 // partitions an instance holds at most, as last counted
	closing sync.WaitGroup
	stop    chan struct{}
	done    chan struct{}
}

func newBalancer(a *App, r *roles, after uint64) *balancer {
	b := &balancer{a: a, r: r, after: after, runs: make([]*bus.Ingest, len(r.parts)), stop: make(chan struct{}), done: make(chan struct{})}
	// Until the instances are counted, as if this one held them all.
	b.target.Store(int64(len(r.parts)))
	return b
}

// openConsumers creates the partitions' consumers that are missing, each
// to start after the stream's last sequence (every record up to it is
// stored: loads read it).
func (b *balancer) openConsumers(ctx context.Context, ackWait time.Duration) error {
	for k := range b.r.parts {
		cfg, err := streams.PartitionIngest(k)
		if err != nil {
			return err
		}
		if ackWait > 0 {
			cfg.AckWait = ackWait
		}
		err = b.a.retryStart(ctx, b.a.nc.ConnectedUrl(), "consumer "+cfg.Durable, func(ctx context.Context) error {
			_, err := bus.OpenConsumer(ctx, b.a.st, cfg, b.after)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *balancer) start() { go b.loop() }

func (b *balancer) loop() {
	defer close(b.done)
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	for {
		b.round()
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
	}
}

// held lists the partitions whose pin this instance holds; b.mu is held.
func (b *balancer) held() []int {
	var out []int
	for k, p := range b.r.parts {
		if b.runs[k] != nil && p.heldPin() != "" {
			out = append(out, k)
		}
	}
	return out
}

// round counts the live instances and moves partitions.
func (b *balancer) round() {
	n := b.live()
	P := len(b.r.parts)
	target := (P + n - 1) / n
	b.target.Store(int64(target))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	held := b.held()
	if len(held) > target {
		if b.over++; b.over >= 2 {
			b.over = 0
			surplus := held[target:]
			b.a.Logger.Info("partitions handed back", "partitions", surplus, "held", len(held), "target", target, "instances", n)
			b.handBack(surplus, fmt.Sprintf("handed back: %d instances, at most %d partitions each", n, target))
			held = held[:target]
		}
	} else {
		b.over = 0
	}
	isHeld := make([]bool, P)
	for _, k := range held {
		isHeld[k] = true
	}
	for k := range P {
		switch {
		case isHeld[k]:
		case len(held) < target && b.runs[k] == nil:
			if err := b.startRun(k); err != nil {
				b.a.Logger.Warn("partition ingest", "partition", k, "err", err)
			}
		case len(held) >= target && b.runs[k] != nil:
			b.stopRun(k)
		}
	}
}

// handBack gives partitions up at once; b.mu is held.
func (b *balancer) handBack(ks []int, reason string) {
	type given struct {
		k  int
		st *store.Store
		in *bus.Ingest
	}
	var gs []given
	for _, k := range ks {
		p := b.r.parts[k]
		pin := p.heldPin()
		st := p.feeding()
		p.lost(reason, false) // requests stop trusting it now
		b.unpin(k, pin)
		gs = append(gs, given{k, st, b.runs[k]})
		b.runs[k] = nil
		b.moved.Add(1)
	}
	for _, g := range gs {
		b.closing.Add(1)
		go func() {
			defer b.closing.Done()
			if g.in != nil {
				if err := g.in.Close(); err != nil {
					b.a.Logger.Warn("partition ingest", "partition", g.k, "err", err)
				}
			}
			if g.st != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = g.st.SaveCheckpoints(ctx) // a hint: the next owner loads from the stream without
				cancel()
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.runs[g.k] == nil {
				b.r.parts[g.k].drop()
			}
		}()
	}
}

// stopRun stops pulling from a partition not held; b.mu is held. A pin
// gained meanwhile is given back.
func (b *balancer) stopRun(k int) {
	in := b.runs[k]
	b.runs[k] = nil
	b.closing.Add(1)
	go func() {
		defer b.closing.Done()
		if err := in.Close(); err != nil {
			b.a.Logger.Warn("partition ingest", "partition", k, "err", err)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.runs[k] != nil {
			return // pulling again
		}
		p := b.r.parts[k]
		if pin := p.heldPin(); pin != "" {
			p.lost("stopped pulling", false)
			b.unpin(k, pin)
		}
		p.drop()
	}()
}

// startRun pulls from a partition's consumer; b.mu is held.
func (b *balancer) startRun(k int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := b.a.st.Consumer(ctx, streams.PartitionName(k))
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			b.a.fail(fmt.Errorf("ingest consumer %s on stream %s was deleted: its partition's records are applied no more; start ctxd again to create it", streams.PartitionName(k), b.a.stream))
		}
		return err
	}
	p := b.r.parts[k]
	tr := &gapTrack{Consumer: cons}
	nc, stream := b.a.nc, b.a.stream
	readRange := func(from, to uint64, fn func(bus.Msg) error) error {
		if tr.nothingBetween(from, to) {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := bus.ReadPartition(ctx, nc, stream, k, from, to, to+1, fn); err != nil {
			return err
		}
		tr.hole = false
		return nil
	}
	pin := bus.WithPin(bus.Pin{Gained: p.gained, Lost: func(_, reason string, refused bool) {
		p.lost(reason, refused)
		if reason == bus.ReasonConsumerDeleted {
			b.a.fail(fmt.Errorf("ingest consumer %s on stream %s was deleted: its partition's records are applied no more; start ctxd again to create it", streams.PartitionName(k), stream))
		}
	}})
	in, err := bus.StartIngest(tr, b.after, readRange, b.a.handlePart(p), b.a.Logger.With("partition", k), pin, bus.WithPullBytes(bus.PullBytes(b.a.nc)))
	if err != nil {
		return err
	}
	b.runs[k] = in
	return nil
}

// unpin gives partition k's pin back, when the server says this instance
// holds it, so that another instance's waiting pull gets it at once.
func (b *balancer) unpin(k int, pin string) {
	if pin == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name := streams.PartitionName(k)
	cons, err := b.a.st.Consumer(ctx, name)
	if err != nil {
		b.a.Logger.Warn("unpin", "partition", k, "err", err)
		return
	}
	for _, g := range cons.CachedInfo().PriorityGroups {
		if g.Group == streams.IngestGroup && g.PinnedClientID == pin {
			if err := b.a.st.UnpinConsumer(ctx, name, streams.IngestGroup); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				b.a.Logger.Warn("unpin", "partition", k, "err", err)
			}
			return
		}
	}
}

// close hands every partition held back at once, and stops pulling.
func (b *balancer) close() {
	// At once, without waiting for a round counting the instances.
	b.mu.Lock()
	b.closed = true
	held := b.held()
	if len(held) > 0 {
		b.handBack(held, "shutting down")
	}
	for k, in := range b.runs {
		if in != nil {
			b.stopRun(k)
		}
	}
	b.mu.Unlock()
	close(b.stop)
	<-b.done
	b.closing.Wait()
}

// live counts the ctxd instances on the stream: the services named ctxd
// that answer $SRV.PING with this instance's partitions; at least 1.
func (b *balancer) live() int {
	nc := b.a.nc
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 1
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.PING.ctxd", inbox, nil); err != nil {
		return 1
	}
	want := strconv.Itoa(len(b.r.parts))
	ids := map[string]bool{}
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
			ids[ping.ID] = true
		}
	}
	return max(1, len(ids))
}

// handlePart returns the handler of partition p's records: each is
// applied to its session in the partition's ingest store, and one whose
// subject is not of the partition (published to transcripts.<k>.<s>
// directly, with the wrong k) is rejected.
func (a *App) handlePart(p *part) bus.Handler {
	P := len(a.roles.parts)
	return func(m bus.Msg) {
		a.removals.cover(m.Seq) // purge.go
		st := p.feeding()
		if st == nil {
			return // the pin was given up while the record was in hand
		}
		session, k, err := subject.SessionOfStored(m.Subject)
		if err == nil && (k != p.k || subject.Partition(session, P) != k) {
			err = fmt.Errorf("%w: subject %q is not of partition %d of %d", subject.ErrBadSession, m.Subject, p.k, P)
		}
		if err != nil {
			st.Reject(store.Rejection{Subject: m.Subject, Seq: m.Seq, Size: len(m.Data), Reason: err.Error(), Kind: store.KindSubject})
			return
		}
		st.Apply(session, m.Seq, m.Data)
	}
}

// drop lets the ingest store go: the partition is not held, and its
// store missed records since.
func (r *part) drop() {
	r.mu.Lock()
	if r.owner.Load() != nil {
		r.r.a.Logger.Error("partition dropped while trusted", "partition", r.k)
		if st := r.owner.Swap(nil); st != nil {
			r.raise(st.Applied())
		}
	}
	r.route(false)
	old := r.feed.Swap(nil)
	if old != nil {
		r.retire(old)
	}
	r.pin = ""
	r.change()
	r.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// gapTrack is a partition consumer that tells its ingest's gap filler
// when a delivery skipped nothing. A partition's records are far apart in
// the stream, so each delivery skips stream sequences; reading them all
// back would cost a read per record. The consumer's delivery sequence
// says instead: the server delivers a consumer's new records in stream
// order, each with the next delivery sequence, so a record delivered
// right after the previous one seen, under the same pin, skipped none of
// the partition's. Messages are handled one at a time, on one goroutine.
type gapTrack struct {
	jetstream.Consumer

	prevC, prevS uint64 // delivery and stream sequences of the previous message
	prevPin      string
	contig       bool   // the current message came right after the previous one
	before, cur  uint64 // the previous and current messages' stream sequences
	hole         bool   // a delivery was missed since the last read
}

func (t *gapTrack) Consume(h jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	return t.Consumer.Consume(func(m jetstream.Msg) {
		if meta, err := m.Metadata(); err == nil {
			pin := ""
			if hdr := m.Headers(); hdr != nil {
				pin = hdr.Get("Nats-Pin-Id")
			}
			t.see(meta.Sequence.Consumer, meta.Sequence.Stream, pin)
		} else {
			t.contig, t.hole = false, true
		}
		h(m)
	}, opts...)
}

// see notes a delivered message: its delivery and stream sequences and
// its pin.
func (t *gapTrack) see(c, s uint64, pin string) {
	t.contig = t.prevC != 0 && c == t.prevC+1 && pin != "" && pin == t.prevPin
	if !t.contig {
		t.hole = true
	}
	t.before, t.cur = t.prevS, s
	t.prevC, t.prevS, t.prevPin = c, s, pin
}

// nothingBetween reports whether the gap filler's read of [from, to],
// up to the current message, can be skipped: the current message came
// right after the previous one, which was handled, and no delivery was
// missed since the last read.
func (t *gapTrack) nothingBetween(from, to uint64) bool {
	return t.contig && !t.hole && from > t.before && to+1 == t.cur
}

// newRoles returns the roles of a stream of layout's partitions.
func newRoles(a *App, reader *store.Store, layout bus.Layout) *roles {
	r := &roles{a: a, reader: reader, layout: layout}
	r.parts = make([]*part, max(1, layout.P))
	for k := range r.parts {
		r.parts[k] = &part{r: r, k: k}
	}
	r.part = r.parts[0]
	return r
}

// openPartitioned starts the partitions' balancer: every partition's
// consumer is made if missing, and the instance pulls as ceil(P / live
// instances) allows.
func (a *App) openPartitioned(ctx context.Context, last uint64) error {
	for _, p := range a.roles.parts {
		p.floor.Store(last)
	}
	b := newBalancer(a, a.roles, last)
	if err := b.openConsumers(ctx, a.AckWait); err != nil {
		return err
	}
	a.roles.bal = b
	// The service exists before any partition is gained: it serves the
	// partition endpoints of those gained before it opens once it does.
	a.svc = server.New(a.nc, a.roles)
	a.roles.router = a.svc
	b.start()
	return nil
}

// partitionLag says why the partitions this instance applies are not
// ready: more records not yet applied, over all of them, than
// ReadyMaxLag. A partition's watermark does not move with the other
// partitions' records, so the lag is its consumer's: the records not
// delivered yet and those delivered but not acknowledged.
func (a *App) partitionLag(ctx context.Context) error {
	var behind uint64
	for _, k := range a.roles.owned() {
		cons, err := a.st.Consumer(ctx, streams.PartitionName(k))
		if err != nil {
			return fmt.Errorf("partition %d: %w", k, err)
		}
		info := cons.CachedInfo()
		behind += info.NumPending + uint64(info.NumAckPending)
	}
	if behind > a.ReadyMaxLag {
		return fmt.Errorf("catching up: %d records of the partitions held not applied yet (more than %d)", behind, a.ReadyMaxLag)
	}
	return nil
}
