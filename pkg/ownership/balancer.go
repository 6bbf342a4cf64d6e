package ownership

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
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
// An unpartitioned stream is one partition: its target is 1 whatever the
// count, so every instance pulls its consumer, as a standby while another
// holds the pin, and none is ever a surplus; with nobody to count or
// tell (alone), it sends no $SRV.PING and no handback.
//
// Only the surplus moves. Correctness never depends on this: a request
// for a partition this instance does not hold is answered through the
// stream (Roles.read), and an ingest store is trusted only while its pin
// is held (bus.Pin hooks).
//
// An instance that stops hands every partition it holds back at once,
// and first says so on HandbackSubject: the others count the instances
// again without it (it still answers $SRV.PING while it finishes the
// requests in hand) and, below the new target, pull from the partitions
// it names at once, so that JetStream pins them to one of them as soon
// as they are unpinned, without waiting for a round. The notice decides
// nothing: it makes the others pull sooner, and the pins still say who
// applies a partition. Two instances that
// both pull a partition get one pin, and the surplus goes back at a later
// round; a notice lost, or an instance that sends none (killed, or of an
// older version), leaves the partitions to the next rounds, as before.

// balanceEvery is how often the balancer counts the live instances and
// moves partitions.
const balanceEvery = 500 * time.Millisecond

// HandbackSubject is where an instance that stops says which partitions
// it hands back (a Handback, JSON), just before it unpins them.
const HandbackSubject = "ctxd.handback"

// Handback is the notice of an instance that stops.
type Handback struct {
	// Stream is the stream whose partitions are handed back.
	Stream string `json:"stream"`
	// Partitions is the stream's number of partitions.
	Partitions int `json:"partitions"`
	// Instance names the instance that stops, as its service's
	// metadata does; ID is its service's id in $SRV.PING, when known.
	Instance string `json:"instance"`
	ID       string `json:"id,omitempty"`
	// HandedBack lists the partitions it unpins.
	HandedBack []int `json:"handed_back"`
}

// leavingFor is how long an instance that said it stops is left out of
// the count while it still answers $SRV.PING: its close takes a few
// seconds at most.
const leavingFor = 30 * time.Second

// balancer runs the partitions' ingests of one instance.
type balancer struct {
	r      *Roles
	cons   Consumers
	peers  Peers
	stream string
	logger *slog.Logger

	// mu guards what follows; no JetStream request is made under it: a
	// round decides under it, gives pins back without it, and looks
	// again after.
	mu   sync.Mutex
	runs []Run // by partition; nil when not pulling
	// giving are the partitions whose pin is being given back: none is
	// pulled from again before the unpin request has ended.
	giving []bool
	over   int // rounds in a row with more than target
	closed bool
	// seen are the instances of the last count, by service id, each
	// with its instance name; self is this instance's service id once a
	// count has seen it.
	seen map[string]string
	self string
	// leaving are the service ids of instances that said they stop, left
	// out of the count until it no longer sees them or leavingFor.
	leaving  map[string]time.Time
	unlisten func() // stops the handbacks' subscription; nil when none

	moved   atomic.Int64 // partitions handed back
	target  atomic.Int64 // partitions an instance holds at most, as last counted
	closing sync.WaitGroup
	stop    chan struct{}
	done    chan struct{}
}

func newBalancer(r *Roles, cons Consumers, peers Peers) *balancer {
	b := &balancer{r: r, cons: cons, peers: peers, stream: r.layout.Stream, logger: r.cfg.Logger,
		runs: make([]Run, len(r.parts)), giving: make([]bool, len(r.parts)), stop: make(chan struct{}), done: make(chan struct{}),
		leaving: map[string]time.Time{}}
	// Until the instances are counted, as if this one held them all.
	b.target.Store(int64(len(r.parts)))
	return b
}

// start listens to the other instances' handbacks and runs the rounds.
func (b *balancer) start() {
	stop, err := b.peers.Listen(b.noticed)
	if err != nil {
		// The rounds move every partition without notices, later.
		b.logger.Warn("partition handbacks: not listening; partitions handed back wait for a round", "err", err)
	}
	b.unlisten = stop
	go b.loop()
}

func (b *balancer) loop() {
	defer close(b.done)
	t := time.NewTicker(balanceEvery)
	defer t.Stop()
	b.round()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.round()
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
	seen := b.peers.Live()
	b.mu.Lock()
	var given *handback
	defer func() {
		b.mu.Unlock()
		given.finish() // the pins given back, the lock let go
	}()
	if b.closed {
		return
	}
	b.counted(seen)
	n := b.count()
	P := len(b.r.parts)
	target := (P + n - 1) / n
	b.target.Store(int64(target))
	held := b.held()
	if len(held) > target {
		if b.over++; b.over >= 2 {
			b.over = 0
			surplus := held[target:]
			b.logger.Info("partitions handed back", "partitions", surplus, "held", len(held), "target", target, "instances", n)
			given = b.handBack(surplus, fmt.Sprintf("handed back: %d instances, at most %d partitions each", n, target))
			held = held[:target]
		}
	} else {
		b.over = 0
	}
	isHeld := make([]bool, P)
	for _, k := range held {
		isHeld[k] = true
	}
	var pull []int
	for k := range P {
		switch {
		case isHeld[k], b.giving[k]:
		case len(held) < target && b.runs[k] == nil:
			pull = append(pull, k)
		case len(held) >= target && b.runs[k] != nil:
			b.stopRun(k)
		}
	}
	b.startRuns(pull)
}

// counted notes the instances a count saw; b.mu is held. An instance
// that said it stops is counted again once it has stopped answering, or
// after leavingFor.
func (b *balancer) counted(seen map[string]string) {
	b.seen = seen
	now := time.Now()
	for id, at := range b.leaving {
		if _, ok := seen[id]; !ok || now.Sub(at) > leavingFor {
			delete(b.leaving, id)
		}
	}
	self, mine := "", 0
	for id, inst := range seen {
		if inst == b.r.cfg.Instance {
			self, mine = id, mine+1
		}
	}
	if mine == 1 {
		b.self = self
	}
}

// count returns the live instances as last counted, without those that
// said they stop; at least 1. b.mu is held.
func (b *balancer) count() int {
	n := 0
	for id := range b.seen {
		if _, gone := b.leaving[id]; !gone {
			n++
		}
	}
	return max(1, n)
}

// noticed takes another instance's handback: that instance is left out
// of the count, and its partitions are pulled from at once (takeOver),
// here rather than in the rounds' goroutine, which may be waiting for
// $SRV.PING replies.
func (b *balancer) noticed(h Handback) {
	if h.Instance == b.r.cfg.Instance {
		return // its own
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	now := time.Now()
	if h.ID != "" && h.ID != b.self {
		b.leaving[h.ID] = now
	}
	for id, inst := range b.seen {
		if inst == h.Instance && id != b.self {
			b.leaving[id] = now
		}
	}
	b.mu.Unlock()
	b.takeOver(h.HandedBack)
}

// takeOver pulls, at once, from the partitions other instances handed
// back, when this one holds fewer than the target counted without them.
// It neither hands back nor stops pulling: the rounds do.
func (b *balancer) takeOver(ks []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	n := b.count()
	P := len(b.r.parts)
	target := (P + n - 1) / n
	b.target.Store(int64(target))
	var pull []int
	for _, k := range ks {
		if b.runs[k] == nil && !b.giving[k] && !slices.Contains(pull, k) {
			pull = append(pull, k)
		}
	}
	held := len(b.held())
	if held >= target || len(pull) == 0 {
		return
	}
	b.logger.Info("partitions handed back by an instance that stops: pulling from them", "partitions", pull, "held", held, "target", target, "instances", n)
	b.startRuns(pull)
}

// announce tells the other instances which partitions this one hands
// back as it stops.
func (b *balancer) announce(ks []int) {
	err := b.peers.Announce(Handback{Stream: b.stream, Partitions: len(b.r.parts), Instance: b.r.cfg.Instance, ID: b.self, HandedBack: ks})
	if err != nil {
		// The others' rounds take the partitions, later.
		b.logger.Warn("partition handback notice", "err", err)
	}
}

// handback is partitions given up (handBack), whose pins are given back
// and ingests stopped once the balancer's lock is let go (finish).
type handback struct {
	b      *balancer
	unpins []unpinning
	gs     []given
}

// given is a partition given up: its ingest and its ingest store.
type given struct {
	k  int
	st *store.Store
	in Run
}

// handBack gives partitions up at once: their stores are not trusted
// from now on, and nothing pulls from them until the returned handback's
// finish, which the caller calls once it has let b.mu go, has given
// their pins back. b.mu is held.
func (b *balancer) handBack(ks []int, reason string) *handback {
	h := &handback{b: b}
	pins := map[int]string{}
	for _, k := range ks {
		p := b.r.parts[k]
		pins[k] = p.heldPin()
		h.gs = append(h.gs, given{k, p.release(reason), b.runs[k]})
		b.moved.Add(1)
	}
	h.unpins = b.unpinning(pins)
	for _, k := range ks {
		b.runs[k] = nil
		b.giving[k] = true
	}
	return h
}

// finish gives the pins back, then stops the ingests and lets the
// stores go; b.mu is not held. A nil handback does nothing.
func (h *handback) finish() {
	if h == nil {
		return
	}
	b := h.b
	b.unpinAll(h.unpins)
	b.mu.Lock()
	for _, g := range h.gs {
		b.giving[g.k] = false
	}
	b.mu.Unlock()
	for _, g := range h.gs {
		b.closing.Add(1)
		go func() {
			defer b.closing.Done()
			if g.in != nil {
				if err := g.in.Close(); err != nil {
					b.logger.Warn("partition ingest", "partition", g.k, "err", err)
				}
			}
			if g.st != nil {
				ctx, cancel := context.WithTimeout(b.r.cfg.Life, 10*time.Second)
				_ = g.st.SaveCheckpoints(ctx) // a hint: the next owner loads from the stream without
				cancel()
				g.st.Close()
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
			b.logger.Warn("partition ingest", "partition", k, "err", err)
		}
		b.mu.Lock()
		if b.runs[k] != nil || b.giving[k] {
			b.mu.Unlock()
			return // pulling again, or given back already
		}
		p := b.r.parts[k]
		pin := p.heldPin()
		if pin != "" {
			p.lost("stopped pulling", false)
			b.giving[k] = true
			b.mu.Unlock()
			b.unpin(k, pin)
			b.mu.Lock()
			b.giving[k] = false
			if b.runs[k] != nil {
				b.mu.Unlock()
				return // pulling again meanwhile: it gains a pin of its own
			}
		}
		p.drop()
		b.mu.Unlock()
	}()
}

// parallel bounds the JetStream API requests a balancer makes at once.
const parallel = 8

// each runs fn for every partition of ks, at most parallel at once, and
// returns when all have returned.
func each(ks []int, fn func(i, k int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for i, k := range ks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i, k)
		}()
	}
	wg.Wait()
}

// startRuns pulls from partitions' consumers at once; b.mu is held. The
// consumers are the ones found at start: a partition handed back waits
// for no lookup. Each is looked up meanwhile all the same, so that one
// deleted stops the instance loudly (the pulls of one not pinned would
// say nothing).
func (b *balancer) startRuns(ks []int) {
	for _, k := range ks {
		if err := b.startRun(k); err != nil {
			b.logger.Warn("partition ingest", "partition", k, "err", err)
		}
	}
	if len(ks) == 0 {
		return
	}
	b.closing.Add(1)
	go func() {
		defer b.closing.Done()
		each(ks, func(_, k int) {
			ctx, cancel := context.WithTimeout(b.r.cfg.Life, 10*time.Second)
			defer cancel()
			if b.cons.Deleted(ctx, k) {
				b.r.fail(deletedPartition(b.r.layout, k))
			}
		})
	}()
}

// startRun pulls from partition k's consumer; b.mu is held.
func (b *balancer) startRun(k int) error {
	p := b.r.parts[k]
	pin := bus.Pin{Gained: p.gained, Lost: func(_, reason string, refused bool) {
		p.lost(reason, refused)
		if reason == bus.ReasonConsumerDeleted {
			b.r.fail(deletedPartition(b.r.layout, k))
		}
	}}
	in, err := b.cons.Pull(k, b.r.handler(p), pin)
	if err != nil {
		return err
	}
	b.runs[k] = in
	return nil
}

// deletedPartition is why an instance stops when partition k's consumer
// was deleted: nothing is delivered any more, to any instance. Stopping
// loudly lets a supervisor start ctxd again, which creates it.
func deletedPartition(l bus.Layout, k int) error {
	what := "its partition's records are applied no more"
	if !l.Partitioned() {
		what = "no record is applied any more"
	}
	return fmt.Errorf("ingest consumer %s on stream %s was deleted: %s; start ctxd again to create it", ConsumerName(l, k), l.Stream, what)
}

// unpin gives partition k's pin back, when the server says this instance
// holds it, so that another instance's waiting pull gets it at once.
func (b *balancer) unpin(k int, pin string) {
	if pin == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.r.cfg.Life, 5*time.Second)
	defer cancel()
	if err := b.cons.Unpin(ctx, k, pin); err != nil {
		b.logger.Warn("unpin", "partition", k, "err", err)
	}
}

// unpinNow gives partition k's pin back, whoever holds it.
func (b *balancer) unpinNow(ctx context.Context, k int) {
	if err := b.cons.Unpin(ctx, k, ""); err != nil {
		b.logger.Warn("unpin", "partition", k, "err", err)
	}
}

// unpinning is a pin to give back: sure when the partition's ingest
// still holds it (records came under it, no pull was refused since), so
// that it is given back without asking the server first whose it is.
type unpinning struct {
	k    int
	pin  string
	sure bool
}

// unpinning lists the pins (by partition) to give back; b.mu is held.
func (b *balancer) unpinning(pins map[int]string) []unpinning {
	var us []unpinning
	for k, pin := range pins {
		if pin != "" {
			us = append(us, unpinning{k, pin, b.runs[k] != nil && b.runs[k].Pinned() == pin})
		}
	}
	return us
}

// unpinAll gives pins back, all at once; b.mu is not held. A sure one
// costs one request less before another instance applies it.
func (b *balancer) unpinAll(us []unpinning) {
	ks := make([]int, len(us))
	for i, u := range us {
		ks[i] = u.k
	}
	each(ks, func(i, k int) {
		if !us[i].sure {
			b.unpin(k, us[i].pin)
			return
		}
		ctx, cancel := context.WithTimeout(b.r.cfg.Life, 5*time.Second)
		defer cancel()
		b.unpinNow(ctx, k)
	})
}

// disconnected gives up the pins of every partition pulled from, the
// connection being down (Roles.Disconnected).
func (b *balancer) disconnected() {
	b.mu.Lock()
	var runs []Run
	for _, in := range b.runs {
		if in != nil {
			runs = append(runs, in)
		}
	}
	b.mu.Unlock()
	for _, in := range runs {
		in.Lose("nats disconnected", false)
	}
}

// close hands every partition held back at once and stops pulling. It
// returns the partitions' ingest stores: their checkpoints are the
// caller's to write, in one bulk with the others (the app's closeCheckpoints).
func (b *balancer) close() []*store.Store {
	// At once, without waiting for a round counting the instances.
	b.mu.Lock()
	b.closed = true
	held := b.held()
	if len(held) > 0 {
		// The notice first: the others pull from these partitions while
		// they are unpinned, and JetStream pins one of their pulls.
		if len(b.r.parts) > 1 {
			b.logger.Info("partitions handed back: shutting down", "partitions", held)
		}
		b.announce(held)
	}
	pins := map[int]string{}
	var stores []*store.Store
	for _, k := range held {
		p := b.r.parts[k]
		pins[k] = p.heldPin()
		if st := p.release(ReasonShutdown); st != nil {
			stores = append(stores, st)
		}
		b.moved.Add(1)
	}
	unpins := b.unpinning(pins)
	var ins []Run
	var ks []int
	for k, in := range b.runs {
		if in != nil {
			ins, ks = append(ins, in), append(ks, k)
			b.runs[k] = nil
		}
	}
	b.mu.Unlock()
	b.unpinAll(unpins)
	if b.unlisten != nil {
		b.unlisten()
	}
	close(b.stop)
	<-b.done
	each(ks, func(i, k int) {
		if err := ins[i].Close(); err != nil {
			b.logger.Warn("partition ingest", "partition", k, "err", err)
		}
	})
	b.closing.Wait() // the rounds' handbacks
	// A pin gained while the pulls stopped is given back too.
	pins = map[int]string{}
	for _, p := range b.r.parts {
		if p.feeding() == nil {
			continue
		}
		pins[p.k] = p.heldPin()
		if st := p.release(ReasonShutdown); st != nil {
			stores = append(stores, st)
		}
	}
	b.mu.Lock()
	unpins = b.unpinning(pins)
	b.mu.Unlock()
	b.unpinAll(unpins)
	return stores
}
