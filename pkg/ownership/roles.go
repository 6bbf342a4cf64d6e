package ownership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/server"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Any number of instances serve one stream. JetStream pins the ingest
// consumer to one of them (the pinned_client priority policy); that one
// applies every record as it is stored, and answers from memory once its
// watermark covers the min_seq asked. Every other instance answers from
// its follower's store, which reads the stream along (follow.go), when
// that covers the min_seq asked; when it does not in time, and on the
// pinned one when its ingest lags, it answers through the stream: per
// request it asks a replica for the session's last record and the
// replica's last stream sequence (bus.LastOf), which must cover the
// min_seq, reads the session's records after those it holds up to that
// last one (validated reads), applies them, and answers. So whichever
// instance a request reaches, its reply holds every record of the
// session up to its seq, and nothing else.
//
// The two paths use two stores. The reader store is fed only by requests
// (store.Catch); it lives as long as the app. The ingest store is fed
// only by the ingest; a new one is made each time the instance gains a
// pin, starting where the first record of the pin is (every record before
// it is stored, and loads read it from the stream). Requests trust it
// only while the pin is held: given up for a lost heartbeat or
// connection, it is trusted again when records of the same pin come (the
// ingest read what the connection lost, and nobody else was pinned
// meanwhile); refused by the server (another instance holds the pin), it
// is let go: a store that missed records while it did not ingest is never
// trusted again.
//
// Within one instance a session's seq never goes backwards: floor is the
// highest stream sequence that any reply may have been built up to, and
// both a new ingest store and a probe must reach it.

// floorBudget is how long a request waits for a replica as current as
// one an earlier reply was built on, whatever its wait_ms: replicas catch
// up within milliseconds.
const floorBudget = 2 * time.Second

// Roles chooses, per request, the store that answers.
//
// With partitions (P > 1, partitions.go) each partition has the owner
// state a single stream has: its own consumer, pin, ingest store and
// floor (a part); a request is answered by its session's partition's.
// With one, the part is roles' own (the embedded one), as before.
type Roles struct {
	cfg    Config
	reader *store.Store
	layout bus.Layout
	// Removals applies the stream's removals to the stores; set before
	// any record or request comes.
	Removals Removals

	*part         // partition 0: the whole stream when unpartitioned
	parts []*part // by partition; parts[0] is part
	// bal runs the partitions' ingests (an unpartitioned stream's, its
	// one partition's); set by OpenIngest, before any record comes.
	bal        *balancer
	handedBack atomic.Bool // HandBack has run
	// router serves each partition's endpoint while its ingest store is
	// trusted; nil when unpartitioned.
	router Router
	// follow runs the follower while the instance is no owner
	// (follow.go); unpartitioned only.
	follow *following
	// probes counts the probes of the stream for a session's last record.
	probes atomic.Uint64
}

// route serves partition k's endpoint, or stops.
func (r *part) route(on bool) {
	if rt := r.r.router; rt != nil {
		rt.Route(r.k, on)
	}
}

// part is the owner state of one partition (or of the whole stream).
type part struct {
	r *Roles
	k int

	feed  atomic.Pointer[store.Store] // the ingest store, fed by the ingest; nil when none
	owner atomic.Pointer[store.Store] // feed while the pin is held, else nil: what requests trust
	floor atomic.Uint64               // every reply so far is built up to at most this

	mu      sync.Mutex    // orders gains and losses
	retired store.Stats   // the counters of the ingest stores no longer fed
	pin     string        // the pin of feed
	changed chan struct{} // closed when the pin is gained or lost
}

// partOf returns the part of a session.
func (r *Roles) partOf(session string) *part {
	if len(r.parts) <= 1 {
		return r.part
	}
	return r.parts[subject.Partition(session, len(r.parts))]
}

// state returns the ingest store (nil when none) and a channel closed
// when that changes.
func (r *part) state() (*store.Store, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.owner.Load(), r.changed
}

// change wakes the requests waiting for the ingest store; r.mu is held.
func (r *part) change() {
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// ingestStore returns the ingest store while the pin is held, nil
// otherwise.
func (r *part) ingestStore() *store.Store { return r.owner.Load() }

// heldPin returns the pin of the ingest store, "" when none.
func (r *part) heldPin() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pin
}

// feeding returns the store the ingest applies to, nil when none.
func (r *part) feeding() *store.Store { return r.feed.Load() }

// gained trusts the ingest store again for a pin resumed, or makes a new
// one for a pin whose first record is first. A new one's watermark starts
// past every record a reply of this instance was built on, so no reply
// goes back.
func (r *part) gained(pin string, first uint64, resumed bool) {
	if r.r.follow.enabled() {
		// Its floor first: the ingest store starts past what the
		// follower showed.
		r.r.follow.gained(r)
	}
	r.mu.Lock()
	if st := r.feed.Load(); resumed && st != nil && r.pin == pin {
		r.owner.Store(st)
		r.change()
		r.mu.Unlock()
		r.route(true)
		r.log().Info("ingest pin held again: this instance applies every record", "pin", pin, "first_seq", first, "watermark", st.Applied())
		return
	}
	st := r.r.cfg.NewStore()
	if bal := r.r.bal; bal != nil && r.r.layout.Partitioned() {
		// The partitions an instance holds share its cache: each
		// partition's ingest store has its part of --cache-bytes and
		// --cache-sessions, as the live instances were last counted.
		share := max(1, bal.target.Load())
		st.MaxBytes = max(1, r.r.cfg.CacheBytes/share)
		st.MaxSessions = max(1, r.r.cfg.CacheSessions/int(share))
	}
	from := max(first-1, r.floor.Load())
	// A store that starts at the stream's first record meets every
	// record of every session: it knows where each starts, and writes
	// their checkpoints without loading them.
	st.Fresh = from == 0
	st.Advance(from)
	old := r.feed.Swap(st)
	if old != nil {
		r.retire(old)
	}
	r.owner.Store(st)
	r.pin = pin
	r.change()
	r.mu.Unlock()
	r.route(true)
	if old != nil {
		old.Close()
	}
	r.log().Info("ingest pin gained: this instance applies every record", "pin", pin, "first_seq", first, "watermark", from)
}

// lost stops trusting the ingest store: requests read the stream from now
// on. A store whose pin was refused is let go.
func (r *part) lost(reason string, refused bool) {
	r.mu.Lock()
	pin := r.pin
	if st := r.owner.Swap(nil); st != nil {
		r.raise(st.Applied())
	}
	r.route(false)
	var old *store.Store
	if refused {
		if old = r.feed.Swap(nil); old != nil {
			r.retire(old)
		}
		r.pin = ""
	}
	r.change()
	r.mu.Unlock()
	if old != nil {
		old.Close()
	}
	how := "ingest pin lost: this instance answers by reading each session's tail"
	if r.r.follow.enabled() {
		how = "ingest pin lost: this instance answers from a follower that reads the stream along, or by reading each session's tail"
	}
	level := slog.LevelWarn
	if reason == ReasonShutdown {
		level = slog.LevelInfo // given back on purpose
	}
	r.log().Log(r.r.cfg.Life, level, how, "pin", pin, "reason", reason, "floor", r.floor.Load())
	r.r.follow.lost()
}

// ReasonShutdown is why an instance that stops gives its pins up.
const ReasonShutdown = "shutting down"

// log is the logger of the part's messages: they name the partition
// when there are several.
func (r *part) log() *slog.Logger {
	if len(r.r.parts) > 1 {
		return r.r.cfg.Logger.With("partition", r.k)
	}
	return r.r.cfg.Logger
}

// raise moves the floor up to seq.
func (r *part) raise(seq uint64) {
	for {
		cur := r.floor.Load()
		if seq <= cur || r.floor.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// Role says what the instance does now, for $SRV.STATS: "ingest" while
// it applies the records (of at least one partition), else "reader".
func (r *Roles) Role() string {
	for _, p := range r.parts {
		if p.ingestStore() != nil {
			return "ingest"
		}
	}
	return "reader"
}

// Owned lists the partitions whose ingest store requests trust now.
func (r *Roles) Owned() []int {
	var out []int
	for _, p := range r.parts {
		if p.ingestStore() != nil {
			out = append(out, p.k)
		}
	}
	return out
}

// Ready implements server.Reacher: the pinned instance answers at once
// what its watermark covers, once it covers every earlier reply's.
func (r *Roles) Ready(session string, seq uint64) bool {
	p := r.partOf(session)
	if st := p.ingestStore(); st != nil {
		return st.Applied() >= max(seq, p.floor.Load())
	}
	return r.follow.ready(p, seq)
}

// Reach implements server.Reacher.
func (r *Roles) Reach(ctx context.Context, session string, seq uint64, timeout time.Duration) (server.Viewer, error) {
	if r.cfg.Stopped != nil {
		if err := r.cfg.Stopped(); err != nil {
			return nil, err // the app's layout watch: what this instance would read misses records
		}
	}
	p := r.partOf(session)
	deadline := time.Now().Add(timeout)
	at := r.follow.loadsBefore() // before the mark (followed)
	mark := r.Removals.Mark()    // package removals: the removals made before now
	// A min_seq is a PubAck's: its record is stored, and the proof that
	// no removal before it was missed starts now, often before the
	// record reaches the ingest or the follower (package removals, Ahead).
	r.Removals.Ahead(seq)
	r.Removals.Drain()
	if st := p.ingestStore(); st != nil && st.Wait(ctx, max(seq, p.floor.Load()), 0) == nil {
		return st, nil // the common case: there already, nothing to watch, no lock
	}
	if st, changed := p.state(); st != nil {
		need, wait := max(seq, p.floor.Load()), timeout
		if need > seq {
			wait = max(timeout, floorBudget)
		}
		if len(r.parts) > 1 {
			// A partition's watermark moves with its own records only:
			// an idle partition's never reaches a later record of
			// another. The stream says where the session ends up to
			// need; the ingest store answers once it has that.
			last, upTo, err := r.probe(ctx, session, seq, need, deadline)
			if err != nil {
				return nil, err
			}
			r.Removals.Cover(upTo) // package removals: no removal before upTo is left in the stores
			need = last
		}
		// The ingest gets there, unless the pin is lost meanwhile: then
		// the stream answers. The floor, which only a lost pin or an
		// earlier reader's reply raises, is within the stream: the
		// ingest gets there too.
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-changed:
				cancel()
			case <-wctx.Done():
			}
		}()
		err := st.Wait(wctx, need, wait)
		cancel()
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil || errors.Is(err, store.ErrWaitExpired) {
			return nil, err
		}
		p.raise(st.Applied())
	}
	if v, ok := r.follow.reach(ctx, p, seq, timeout, mark, at); ok {
		if r.reader.Loaded(session) {
			// Read by its tail before the follower ran: the follower's
			// store holds it from now on, and one copy is enough.
			r.reader.Evict(session)
		}
		return v, nil // follow.go: the follower has it
	}
	return r.read(ctx, p, session, seq, deadline)
}

// read brings the reader store's session up to a probe of the stream
// that covers seq and the floor, and returns a Viewer that shows it.
func (r *Roles) read(ctx context.Context, p *part, session string, seq uint64, deadline time.Time) (server.Viewer, error) {
	probe := func(ctx context.Context) (last, upTo uint64, err error) {
		last, upTo, err = r.probe(ctx, session, seq, max(seq, p.floor.Load()), deadline)
		if err == nil {
			p.raise(upTo)
		}
		return last, upTo, err
	}
	last, upTo, err := probe(ctx)
	if err != nil {
		return nil, err
	}
	return caught{st: r.reader, last: last, upTo: upTo, removals: r.Removals, again: probe}, nil
}

// probe asks the stream for the session's last record (0 for none) as a
// replica that holds every record up to need sees it, need being seq or
// past it (an earlier reply's floor); upTo is that replica's last
// sequence. The caller covers upTo (package removals) before it shows what it
// has of the session.
func (r *Roles) probe(ctx context.Context, session string, seq, need uint64, deadline time.Time) (last, upTo uint64, err error) {
	floorDeadline := time.Now().Add(floorBudget)
	delay := time.Millisecond
	for {
		r.probes.Add(1)
		m, upTo, err := r.layout.LastOf(ctx, r.cfg.Conn, session)
		if err != nil {
			return 0, 0, fmt.Errorf("last record of %s: %w", session, err)
		}
		if upTo >= need {
			if m != nil {
				last = m.Seq
			}
			return last, upTo, nil
		}
		now := time.Now()
		switch {
		case upTo < seq && now.After(deadline):
			return 0, 0, fmt.Errorf("%w: the stream holds up to %d, min_seq %d", store.ErrWaitExpired, upTo, seq)
		case upTo >= seq && now.After(floorDeadline):
			return 0, 0, fmt.Errorf("%w: no replica reached %d, an earlier reply's", store.ErrWaitExpired, need)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, 0, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// caught shows a session of the reader store at or past its record last
// (store.ViewAtChecked), as a probe that saw the stream up to upTo found
// it. What it shows rests on no removal the stores have not applied,
// made before the stream's state was checked after the read (package removals).
type caught struct {
	st         *store.Store
	last, upTo uint64
	removals   Removals
	// again probes the stream again: for a record last that a removal
	// took after the probe.
	again func(context.Context) (last, upTo uint64, err error)
}

func (c caught) View(ctx context.Context, session string, fn func(p *projection.Session)) error {
	for try := 0; ; try++ {
		err := c.st.ViewAtChecked(ctx, session, c.last, func(ctx context.Context, read bool) error {
			return c.removals.Settle(ctx, read, c.upTo)
		}, fn)
		if !errors.Is(err, store.ErrBehind) || c.again == nil || try == 2 {
			return err
		}
		// The session's last record left the stream after the probe
		// found it: the stream says again where the session ends.
		if c.last, c.upTo, err = c.again(ctx); err != nil {
			return err
		}
	}
}

// Wait implements server.Projections (the service uses Reach): it
// returns once this instance's ingest has applied every record up to
// seq, waiting for the instance to gain the pin if it must; or
// store.ErrWaitExpired after timeout.
//
// With partitions no store applies every record: it returns
// store.ErrWaitExpired at once.
func (r *Roles) Wait(ctx context.Context, seq uint64, timeout time.Duration) error {
	if len(r.parts) > 1 {
		return fmt.Errorf("%w: the stream is partitioned: no instance applies every record", store.ErrWaitExpired)
	}
	if timeout <= 0 {
		if st := r.ingestStore(); st != nil {
			return st.Wait(ctx, seq, 0)
		}
		return fmt.Errorf("%w: this instance does not hold the ingest", store.ErrWaitExpired)
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	expired := func(err error) error {
		if parent.Err() != nil {
			return parent.Err()
		}
		return fmt.Errorf("%w: %w", store.ErrWaitExpired, err)
	}
	for {
		st, changed := r.state()
		if st == nil {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return expired(errors.New("this instance does not hold the ingest"))
			}
		}
		wctx, wcancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-changed:
				wcancel()
			case <-wctx.Done():
			}
		}()
		err := st.Wait(wctx, seq, timeout)
		wcancel()
		if err == nil || errors.Is(err, store.ErrWaitExpired) {
			return err
		}
		if ctx.Err() != nil {
			return expired(err)
		}
		// The pin changed: wait on the store of the new one, if any.
	}
}

// View implements server.Projections; the service uses the Viewer Reach
// returns.
func (r *Roles) View(ctx context.Context, session string, fn func(p *projection.Session)) error {
	if st := r.partOf(session).ingestStore(); st != nil {
		return st.View(ctx, session, fn)
	}
	return r.reader.View(ctx, session, fn)
}

// Current is the store the instance answers from now: with partitions,
// the reader's.
func (r *Roles) Current() *store.Store {
	if len(r.parts) > 1 {
		return r.reader
	}
	if st := r.ingestStore(); st != nil {
		return st
	}
	return r.reader
}

// Rejected lists the records this instance skipped, oldest first, as
// its ingests met them or its reads did (a record stored before an
// ingest store began is met only by a load): its stores share one list.
func (r *Roles) Rejected() []store.Rejection { return r.reader.Rejected() }

// Loaded reports whether a request for the session is answered from
// memory now: while this instance ingests its partition, a session its
// store holds; otherwise one the follower's store holds (follow.go).
// Without either, none: each request reads the session's tail first.
func (r *Roles) Loaded(session string) bool {
	if st := r.partOf(session).ingestStore(); st != nil {
		return st.Loaded(session)
	}
	return r.follow.loaded(session)
}

// Stats counts the instance's work, so that a counter never goes back
// when the store that answers changes: records and duplicates are the
// ingests', over every ingest store the instance had; loads and
// evictions those of all its stores; rejections its one list's. The
// gauges (sessions, loaded, bytes) add up what its stores hold now;
// applied is the watermark of the store that answers (the highest of
// the ingest stores' with partitions).
func (r *Roles) Stats() store.Stats {
	rd := r.reader.Stats()
	out := store.Stats{Rejected: rd.Rejected, RejectedBy: rd.RejectedBy}
	add := func(st store.Stats, ingest bool) {
		if ingest {
			out.Records += st.Records
			out.Duplicates += st.Duplicates
		}
		out.Loads += st.Loads
		out.SnapshotLoads += st.SnapshotLoads
		out.Evictions += st.Evictions
		out.Sessions += st.Sessions
		out.Loaded += st.Loaded
		out.Bytes += st.Bytes
	}
	add(rd, false)
	fs := r.follow.stats()
	add(fs, false)
	out.FollowerApplied = fs.FollowerApplied
	if r.follow != nil {
		out.FollowerReplies = r.follow.replies.Load()
	}
	out.StreamProbes = r.probes.Load()
	out.Applied = r.Current().Applied()
	for _, p := range r.parts {
		p.mu.Lock()
		add(p.retired, true)
		p.mu.Unlock()
		if st := p.feed.Load(); st != nil {
			s := st.Stats()
			add(s, true)
			if len(r.parts) > 1 {
				out.Applied = max(out.Applied, s.Applied)
			}
		}
	}
	return out
}

// retire adds the counters of an ingest store no longer fed to those
// Stats reports; r.mu is held.
func (r *part) retire(st *store.Store) {
	s := st.Stats()
	r.retired.Records += s.Records
	r.retired.Duplicates += s.Duplicates
	r.retired.Loads += s.Loads
	r.retired.SnapshotLoads += s.SnapshotLoads
	r.retired.Evictions += s.Evictions
}
