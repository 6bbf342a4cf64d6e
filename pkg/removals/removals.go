// Package removals applies the stream's removals (purges, deleted
// messages) to the stores of an instance: the removal watcher. It knows
// the stores only through a function that lists them, and the stream
// through a connection.
//
// Operators remove records from the stream: nats stream purge (of one
// subject or all, with --seq or --keep), nats stream rmm. A context holds
// only what the stream holds, so the stores must forget what they hold of
// the sessions concerned (store.Forget), and a record stored after a
// removal must never be applied to, nor served with, what the removal
// took.
//
// The server tells of each removal in the API audit advisory of its
// request (bus.AuditAdvisory), which names the purge's filter, or the
// message deleted, and how many messages went. But the advisory is plain
// NATS, sent beside the reply to the operator, in no order with the
// records the stream stores next, and lost while the connection is down
// (or when ctxd's user may not subscribe to it). So it is not trusted
// alone: the stream's own state says how many of its sequences hold no
// message (bus.Removed), which moves when and only when messages leave
// it. ctxd counts the messages the advisories it applied removed; when
// the stream's count is that count plus what it was at the start, every
// removal of a record stored before the stream's last sequence then has
// been applied, and that sequence is verified.
//
// The ingest applies no record past the verified sequence before it has
// checked the stream's state again (Watcher.Cover); nor does a reader show a
// session caught up to a sequence past it (Watcher.Settle). A check that finds
// removals no advisory told of waits a moment for their advisories, then
// forgets every session in both stores: when in doubt, the sessions load
// from the stream, which holds only what remains. So the ingest store
// never holds a record stored after a removal together with one the
// removal took: a reply racing with a removal is built from what the
// stream held before it, or after it. A loaded session that a load
// finishes reading after a removal reads again (store.Forget).
//
// A reader (an instance not pinned, or one whose ingest lags) catches a
// cached session up by reading its records after those it holds. Each
// request applies the advisories received first, and a check covers the
// stream's last sequence its probe saw. That alone would leave a removal
// no record was stored after: the stream's last sequence stays where an
// earlier check verified it, and until its advisory comes (if ever)
// nothing tells of it. So whenever a reply is to rest on what the
// request reads of the stream now, beside what the store read before
// (store.ViewAtChecked: it read records of a cached session, or loads
// one from a compaction it remembers, or finds the session's last record
// below one it has seen), the request proves, after the read and before
// the reply is built, that every removal made before then has been
// applied (Watcher.Settle): it reads the stream's count after the read, unless
// a check that began after the read has ended meanwhile, and a count
// that moved is handled as check handles it (the advisories awaited, or
// every session forgotten). That one read also covers the probe's last
// sequence: a request that reads a new record pays one read of the
// stream's state, as a check before the read would cost. A session
// forgotten then loads from the stream; if the removal took the
// session's last record the probe found, the stream is asked again where
// the session ends (caught). A session asked for again with nothing new
// to read costs no read of the stream's state: it is answered from
// memory, as before a removal not told yet, until the advisory or the
// next check (removalCheckEvery) finds the removal. So a reply of the
// reader holds what the stream held of the session before a removal
// made before the request, or after it, never some of each. What is
// left is a removal made while the request reads, after its check
// (during the load the check made necessary, say): a read half done
// when the removal comes is read again once its advisory is applied
// (store.Forget), and not otherwise.
//
// A follower's store (package ownership) is fed as the ingest's is,
// each record covered before it is applied. A request that needs a
// record starts its proof as it comes (Watcher.Ahead), often before the
// record reaches the ingest or the follower: the watcher's goroutine
// checks the stream's state in the background, one check at a time, each
// covering every record stored before its read began, and the records
// delivered while one is in flight share the next. The cover that
// applies the record finds that check done or under way: a turn waits
// for what is left of a read that began as the request came, not for a
// read of its own.
//
// A stream with limits (AllowStreamLimits) drops messages of its own
// accord: its count moves without advisories, so only the advisories are
// applied there, and records aged out of the stream may stay in cached
// contexts until the session is loaded again.
package removals

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
)

// Bounds of the removal watcher.
const (
	// removalAdvisories is how many advisories wait to be applied;
	// past it they are dropped, and the next check finds the removals.
	removalAdvisories = 4096
	// removalCheckTimeout bounds one read of the stream's state.
	removalCheckTimeout = 2 * time.Second
	// removalReadRetry is how long a check reads the stream's state
	// again after a read failed, before it forgets every session.
	removalReadRetry = 10 * time.Second
	// removalGrace is how long a check that finds removals not told
	// waits for their advisories before it forgets every session.
	removalGrace = 250 * time.Millisecond
	// removalDrainEvery is how often advisories are applied when no
	// record or request comes to apply them.
	removalDrainEvery = 100 * time.Millisecond
	// removalCheckEvery is how often the stream's state is checked when
	// nothing else does: it bounds how long an advisory lost while the
	// connection was down leaves a session as it was before the removal.
	removalCheckEvery = 5 * time.Second
)

// Watcher applies the stream's removals to the stores.
type Watcher struct {
	nc     *nats.Conn
	stream string
	stores func() []*store.Store
	logger *slog.Logger
	// removed is told of every removal applied: the snapshots go.
	removed func()
	// counted says the stream removes nothing of its own accord: its
	// count of removed sequences is checked.
	counted bool
	// state reads the stream's count of removed sequences and its last
	// sequence (bus.Removed).
	state func(ctx context.Context) (removed, last uint64, err error)

	sub *nats.Subscription
	ch  chan *nats.Msg

	// ahead is the highest sequence Ahead was given, and kick tells the
	// watcher's goroutine to check the stream's state until it is
	// verified.
	ahead atomic.Uint64
	kick  chan struct{}

	// verified: every removal made before the record at this sequence
	// was stored has been applied to the stores.
	verified atomic.Uint64
	// busy counts the goroutines applying advisories, which take them
	// from ch under mu (or as the check under way): one that finds ch
	// empty and none busy has nothing to wait for.
	busy atomic.Int32
	// reads counts the reads of the stream's state a check began;
	// checked is the count at the start of the last read of the last
	// check that ended (under mu): every removal made before that read
	// began has been applied.
	reads   atomic.Uint64
	checked atomic.Uint64

	// mu guards base, applied and flight, and is never held across a
	// read of the stream's state: a check reads with no lock held, and
	// whoever needs it meanwhile waits for its end (flight), not for a
	// lock.
	mu      sync.Mutex
	base    int64 // the stream's removed sequences not counted in applied
	applied int64 // messages removed by the advisories applied
	// flight is the check under way, nil when none is. While one is, it
	// alone applies advisories: base and applied move with what its
	// reads saw.
	flight chan struct{}

	// ctx ends at close: a read under way stops.
	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}
}

// Open subscribes to the advisories, reads where the stream is,
// and starts the watcher's goroutine. ctx bounds the start; life is the
// app's, whose end stops the reads of the stream's state.
func Open(ctx, life context.Context, nc *nats.Conn, stream string, counted bool, stores func() []*store.Store, onRemoval func(), logger *slog.Logger) (*Watcher, error) {
	r := &Watcher{nc: nc, stream: stream, stores: stores, removed: onRemoval, logger: logger, counted: counted,
		ch: make(chan *nats.Msg, removalAdvisories), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(life)
	r.state = func(ctx context.Context) (uint64, uint64, error) { return bus.Removed(ctx, nc, stream) }
	var err error
	if r.sub, err = nc.ChanSubscribe(bus.AuditAdvisory, r.ch); err != nil {
		r.cancel()
		return nil, fmt.Errorf("subscribe to %s: %w", bus.AuditAdvisory, err)
	}
	// The subscription holds before the stream's state is read: a removal
	// after the read is told by an advisory.
	fctx, cancel := context.WithTimeout(ctx, removalCheckTimeout)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		r.cancel()
		r.sub.Unsubscribe()
		return nil, fmt.Errorf("subscribe to %s: %w", bus.AuditAdvisory, err)
	}
	removed, last, err := r.state(ctx)
	if err != nil {
		r.cancel()
		r.sub.Unsubscribe()
		return nil, err
	}
	r.base = int64(removed)
	r.verified.Store(last)
	go r.run()
	return r, nil
}

// Close stops the goroutine and the subscription.
func (r *Watcher) Close() {
	if r == nil {
		return
	}
	close(r.stop)
	r.cancel()
	<-r.done
	r.sub.Unsubscribe()
}

func (r *Watcher) run() {
	defer close(r.done)
	drain := time.NewTicker(removalDrainEvery)
	defer drain.Stop()
	lastCheck := time.Now()
	for {
		select {
		case <-r.stop:
			return
		case <-r.kick:
			r.checkAhead()
			continue
		case <-drain.C:
		}
		r.Drain()
		if r.counted && time.Since(lastCheck) >= removalCheckEvery {
			lastCheck = time.Now()
			if r.lockIdle(nil) == nil {
				r.drainLocked()
				r.check(r.begin(), 0)
			}
		}
	}
}

// drain applies the advisories received so far. It costs nothing when
// there are none.
func (r *Watcher) Drain() {
	if r == nil || len(r.ch) == 0 && r.busy.Load() == 0 {
		return
	}
	if r.lockIdle(nil) != nil {
		return
	}
	r.drainLocked()
	r.mu.Unlock()
}

// lockIdle locks r.mu once no check is under way, waiting for the one
// that is (no lock held meanwhile); it returns done's error, unlocked,
// when done is closed first. A nil done never is.
func (r *Watcher) lockIdle(done <-chan struct{}) error {
	r.mu.Lock()
	for r.flight != nil {
		f := r.flight
		r.mu.Unlock()
		select {
		case <-f:
		case <-done:
			return context.Canceled
		case <-r.stop:
			// Closing: the check under way ends at once (check).
			<-f
		}
		r.mu.Lock()
	}
	return nil
}

// begin marks a check under way and unlocks r.mu, which is held: the
// caller checks (check), which ends it.
func (r *Watcher) begin() chan struct{} {
	f := make(chan struct{})
	r.flight = f
	r.mu.Unlock()
	return f
}

// drainLocked applies the advisories waiting; r.mu is held, or the
// caller's check is under way.
func (r *Watcher) drainLocked() {
	r.busy.Add(1)
	defer r.busy.Add(-1)
	for {
		select {
		case m := <-r.ch:
			r.apply(m)
		default:
			return
		}
	}
}

// cover returns once every removal made before the record seq was stored
// has been applied: at once when seq is verified, else after a check of
// the stream's state.
func (r *Watcher) Cover(seq uint64) {
	if r == nil {
		return
	}
	if seq <= r.verified.Load() || !r.counted {
		r.Drain()
		return
	}
	// A check under way covers seq when its read began after the record
	// was stored: verified is tested again once it ends.
	r.lockIdle(nil)
	r.drainLocked()
	if seq <= r.verified.Load() {
		r.mu.Unlock()
		return
	}
	r.check(r.begin(), seq)
}

// Ahead starts proving that every removal made before the record seq
// was stored has been applied, and returns at once: the watcher's
// goroutine checks the stream's state, one check at a time, each
// covering every record stored before its read, until seq is verified.
// A request calls it for the record it needs as it comes (a PubAck's
// sequence), so that the proof the ingest or the follower makes before
// applying the record (Cover) is under way, or done, by the time the
// record reaches it: the check's round trip runs beside the record's way
// to the store, not after it. Records delivered while a check is in
// flight share the next one.
func (r *Watcher) Ahead(seq uint64) {
	if r == nil || !r.counted || seq <= r.verified.Load() {
		return
	}
	for {
		cur := r.ahead.Load()
		if seq <= cur || r.ahead.CompareAndSwap(cur, seq) {
			break
		}
	}
	select {
	case r.kick <- struct{}{}:
	default: // one is pending: it reads ahead when it runs
	}
}

// checkAhead checks the stream's state once unless what Ahead was given
// is verified. An Ahead call during the check kicks again: the next check
// covers its record.
func (r *Watcher) checkAhead() {
	if r.ahead.Load() <= r.verified.Load() || r.lockIdle(r.stop) != nil {
		return
	}
	r.drainLocked()
	if r.ahead.Load() <= r.verified.Load() {
		r.mu.Unlock()
		return
	}
	r.check(r.begin(), 0)
}

// Verified returns the sequence verified so far: every removal made
// before the record at it was stored has been applied to the stores. On
// a stream that removes records of its own accord it is 0: nothing is
// verified there.
func (r *Watcher) Verified() uint64 {
	if r == nil || !r.counted {
		return 0
	}
	return r.verified.Load()
}

// covered reports whether cover(seq) returns without reading the
// stream's state.
func (r *Watcher) Covered(seq uint64) bool {
	return r == nil || !r.counted || seq <= r.verified.Load()
}

// settle is cover for a reader, called after it caught a session up and
// before it shows it (store.ViewAtChecked), upTo being the stream's last
// sequence its probe saw. When the reader read the stream (read), a
// removal before the read with no record stored after it leaves the
// stream's last sequence where an earlier check verified it, and cover
// would not look: settle then returns once every removal made before
// it was called has been applied to the stores, and upTo is verified.
// It checks the stream's state, unless a check that began reading it
// after settle was called has ended meanwhile and verified upTo (one
// check answers the readers that waited for it together).
func (r *Watcher) Settle(ctx context.Context, read bool, upTo uint64) error {
	if r == nil {
		return nil
	}
	if !read {
		r.Cover(upTo)
		return nil
	}
	_, err := r.SettleSince(ctx, r.Mark(), upTo)
	return err
}

// mark returns what settleSince is given to prove the removals made
// before mark was called.
func (r *Watcher) Mark() uint64 {
	if r == nil {
		return 0
	}
	return r.reads.Load()
}

// settleSince returns once every removal made before mark was taken
// (mark) has been applied to the stores, and upTo is verified: at once
// when a check that began reading the stream's state after it has ended
// meanwhile and verified upTo, else after a check of its own. On a
// stream that removes records of its own accord it covers upTo.
//
// It returns the sequence verified then, upTo or past it: every removal
// made before that record was stored has been applied too. A check
// verifies the stream's last sequence it read, which is past what a
// follower had applied when the check began: a view that finds records
// applied meanwhile finds them within it, most often, and needs no other
// check (store.ViewSettled).
func (r *Watcher) SettleSince(ctx context.Context, mark, upTo uint64) (uint64, error) {
	if r == nil {
		return upTo, nil
	}
	if !r.counted {
		r.Cover(upTo)
		return upTo, nil
	}
	if r.lockIdle(ctx.Done()) != nil {
		return 0, ctx.Err()
	}
	r.drainLocked()
	if r.checked.Load() > mark && r.verified.Load() >= upTo {
		r.mu.Unlock()
		return max(upTo, r.verified.Load()), nil
	}
	if err := ctx.Err(); err != nil {
		r.mu.Unlock()
		return 0, err
	}
	r.check(r.begin(), upTo)
	return max(upTo, r.verified.Load()), nil
}

// stores returns the stores a removal concerns: the reader's, those

// appliedRemovals reads the stream's count of removed sequences and
// reports whether every removal it counts has been applied to the
// stores the removals concern now (the stores Open was given). A snapshot taken
// after it returns true, of a store that was among them then, holds no
// record removed before the read; a removal after it moves the stream's
// count past the one returned, and the snapshot is not used. A store
// that has left them (a partition handed back) misses the removals
// applied since: its snapshots need a count read while it was among
// them.
func (r *Watcher) Applied(ctx context.Context) (uint64, bool) {
	if r == nil || !r.counted {
		return 0, false
	}
	if r.lockIdle(ctx.Done()) != nil {
		return 0, false
	}
	r.drainLocked()
	// Every removal counted here is applied: one the read below counts
	// that this does not was not applied when the stores were.
	counted := r.base + r.applied
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, removalCheckTimeout)
	defer cancel()
	removed, _, err := r.state(ctx)
	if err != nil || int64(removed) != counted {
		return 0, false
	}
	return removed, true
}

// Count returns the stream's removed count at which every removal has
// been applied to the stores, as last known.
func (r *Watcher) Count() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return uint64(r.base + r.applied)
}

// Counted reports whether the stream's count of removed sequences is
// checked: it removes nothing of its own accord.
func (r *Watcher) Counted() bool { return r != nil && r.counted }
