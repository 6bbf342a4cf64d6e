package ownership

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/server"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// An instance that does not hold the ingest pin of an unpartitioned
// stream answers most requests from a follower: an ordered consumer
// (bus.Follow) that reads the whole stream along, from where it was when
// the follower started, and applies every record to a store of its own,
// as the ingest does to its store. The follower store is made like an
// ingest store: records applied as they come, sessions loaded on demand
// from the stream up to its watermark. It writes no checkpoint and no
// snapshot (those are the ingest's; its loader is the reader's,
// read-only). The removals apply to it as to the other stores, and as
// the ingest does the follower applies no record before every removal
// made before it was stored has been applied (removals' Cover): one read
// of the stream's state at a time, shared by the records delivered
// meanwhile, and often begun before the record came, by the request
// that asks for it (Roles.Reach, removals' Ahead). So every state of a
// session the follower's records make is proven as it is made, however
// fast they come; what a load read is proven when a reply shows it
// (followed), and a session fetched again unchanged costs its request
// nothing.
//
// A request whose min_seq, and the floor, the follower's watermark
// covers is answered from the follower store at once, without reading
// the stream. One it does not cover yet waits for it at most followWait
// (a record reaches the follower about when its publisher has the
// PubAck), then is answered by a probe of the stream (Roles.read), the
// floor raised to the follower's watermark first: no later reply of the
// instance is built on less than a follower's reply showed.
//
// The follower costs a second application of every record: it runs only
// while it pays. It starts when the instance answers as a reader (the
// first request that reaches a non-owner, or the pin lost), in the
// background: the requests meanwhile probe the stream. It stops, and its
// store goes, when the instance gains the pin: the floor is raised to its
// watermark first, so the new ingest store starts past what it showed. A
// partitioned stream has none: its requests are routed to the
// partitions' owners.
//
// Memory: on an unpartitioned stream the reader store holds only the
// sessions of the requests the follower did not answer in time (or that
// reached the owner while its ingest lagged): it has a quarter of the
// instance's --cache-bytes and --cache-sessions, and the follower store
// the rest (readerShare), so that an instance without the pin holds at
// most --cache-bytes. The ingest store keeps the whole of them, as
// before: it and the follower's live together only while a pin lost for
// a dropped connection may come back (the ingest store is kept for it).

// followWait bounds how long a request waits for the follower to apply
// the records it needs before it probes the stream.
const followWait = 100 * time.Millisecond

// followRetry is how long after a follower failed to start the next
// request tries again.
const followRetry = 5 * time.Second

// followStart bounds the start of a follower: the stream's last
// sequence read, and its consumer made.
const followStart = 10 * time.Second

// readerShare is the reader store's share of a bound of the cache on an
// unpartitioned stream: a quarter, at least 1 of a bound above 0. The
// follower store has the rest.
func readerShare[T int | int64](n T) T {
	if n <= 0 {
		return n
	}
	return max(1, n/4)
}

// follower is a running follower and its store.
type follower struct {
	st  *store.Store
	run *bus.Follower
	// clean is the count of the store's loads (store.Stats.Loads) that
	// ended before a request's removals' mark, the request having
	// proven since every removal made before that mark (settleSince):
	// while the store has loaded no session since, what it holds was
	// read of the stream before every removal not applied yet, and only
	// records applied since may sit beside what such a removal took.
	clean atomic.Uint64
	// stuck is the watermark at which a request last waited followWait
	// in vain, and stuckAt when (unix nanoseconds): while the watermark
	// stays there (the follower's consumer is being made again after a
	// server stopped, say), requests do not wait for it again within
	// followWait.
	stuck, stuckAt atomic.Int64
}

// wait returns once the follower's store has applied every record up to
// need, waiting at most timeout and followWait, and not at all while it
// is stuck.
func (fl *follower) wait(ctx context.Context, need uint64, timeout time.Duration) bool {
	wait := min(timeout, followWait)
	applied := fl.st.Applied()
	if applied >= need {
		return true
	}
	if int64(applied) == fl.stuck.Load() && time.Since(time.Unix(0, fl.stuckAt.Load())) < followWait {
		wait = 0
	}
	if fl.st.Wait(ctx, need, wait) == nil {
		return true
	}
	if now := fl.st.Applied(); now == applied && wait > 0 {
		fl.stuck.Store(int64(now))
		fl.stuckAt.Store(time.Now().UnixNano())
	}
	return false
}

// following starts and stops the instance's follower.
type following struct {
	r *Roles
	// cur is the follower running; nil when none.
	cur atomic.Pointer[follower]
	// replies counts the requests answered from a follower store.
	replies atomic.Uint64

	mu       sync.Mutex
	starting *store.Store // the store of the follower being started
	pinned   bool         // the instance holds the pin: no follower
	closed   bool
	gen      uint64 // moved by each stop: a start begun before is dropped
	failedAt time.Time
	retired  store.Stats // the counters of the follower stores stopped
	wg       sync.WaitGroup
}

// enabled reports whether the instance may run a follower: on an
// unpartitioned stream only. A nil following runs none.
func (f *following) enabled() bool { return f != nil && len(f.r.parts) <= 1 }

// want starts a follower in the background unless one runs or starts,
// the instance holds the pin, or one failed to start within followRetry.
func (f *following) want() {
	if !f.enabled() || f.cur.Load() != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.pinned || f.starting != nil || f.cur.Load() != nil || time.Since(f.failedAt) < followRetry {
		return
	}
	st := f.r.cfg.NewStore()
	st.MaxBytes -= readerShare(st.MaxBytes)
	st.MaxSessions -= readerShare(st.MaxSessions)
	// It writes no checkpoint (but those that replace one its loads
	// found wrong, as the reader's): the ingest writes them.
	st.Loader = f.r.cfg.ReadOnly
	f.starting = st // the removals concern it from now on (Roles.Stores)
	f.wg.Add(1)
	go f.start(f.gen, st)
}

// start starts a follower with store st, and makes it the one requests
// use unless the instance gained the pin or closed meanwhile.
func (f *following) start(gen uint64, st *store.Store) {
	defer f.wg.Done()
	cfg := f.r.cfg
	ctx, cancel := context.WithTimeout(cfg.Life, followStart)
	defer cancel()
	run, err := func() (*bus.Follower, error) {
		last, _, err := cfg.Stream.State(ctx)
		if err != nil {
			return nil, err
		}
		// Every record up to last is stored: loads read those, the
		// follower applies the later ones. A store that starts at the
		// stream's first record meets every session.
		st.Fresh = last == 0
		st.Advance(last)
		// Applied once proven, as the ingest applies them: a state
		// the records make holds nothing a removal before them took.
		// (A reply that showed states applied unproven would have to
		// prove each after it was made, and a session written faster
		// than a proof takes would never be shown.)
		return cfg.Stream.Follow(ctx, last, bus.PullBytes(cfg.Conn), func(m bus.Msg) {
			f.r.Removals.Cover(m.Seq)
			applyRecord(st, m)
		}, cfg.Logger)
	}()
	f.mu.Lock()
	f.starting = nil
	if err != nil {
		f.failedAt = time.Now()
		f.mu.Unlock()
		st.Close()
		cfg.Logger.Warn("follower not started: requests read the stream", "err", err)
		return
	}
	if f.closed || f.pinned || f.gen != gen {
		f.mu.Unlock()
		run.Stop()
		st.Close()
		return
	}
	fl := &follower{st: st, run: run}
	fl.stuck.Store(-1)
	f.cur.Store(fl)
	f.mu.Unlock()
	cfg.Logger.Info("follower started: this instance answers from the records it reads along", "watermark", st.Applied())
}

// gained stops the follower, the instance having gained the pin; the
// floor of part p rises to the follower's watermark first. It returns
// once the follower applies nothing more.
func (f *following) gained(p *part) { f.stop(p, func() { f.pinned = true }) }

// lost starts a follower, the instance having lost the pin.
func (f *following) lost() {
	if !f.enabled() {
		return
	}
	f.mu.Lock()
	f.pinned = false
	f.mu.Unlock()
	f.want()
}

// noMore lets no follower start from now on; the one running, if any,
// goes on until close.
func (f *following) noMore() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
}

// close stops the follower for good, and waits for a start under way.
func (f *following) close(p *part) {
	if f == nil {
		return
	}
	f.stop(p, func() { f.closed = true })
	f.wg.Wait()
}

// stop stops the follower, with set applied under the lock.
func (f *following) stop(p *part, set func()) {
	f.mu.Lock()
	set()
	f.gen++
	fl := f.cur.Swap(nil)
	f.mu.Unlock()
	if fl == nil {
		return
	}
	fl.run.Stop()
	// No later reply goes back past what a reply of the follower showed.
	p.raise(fl.st.Applied())
	s := fl.st.Stats()
	f.mu.Lock()
	f.retired.Loads += s.Loads
	f.retired.SnapshotLoads += s.SnapshotLoads
	f.retired.Evictions += s.Evictions
	f.mu.Unlock()
	fl.st.Close()
	f.r.cfg.Logger.Info("follower stopped", "watermark", fl.st.Applied(), "floor", p.floor.Load())
}

// reach returns the follower store once its watermark covers seq and
// the floor of p, waiting at most followWait (and timeout) for it;
// false when there is no follower or it is behind, the floor then
// raised to its watermark. With no follower it starts one. mark is the
// removals' mark (package removals) when the request came, and at the
// follower's count of loads before it was taken (loadsBefore).
func (f *following) reach(ctx context.Context, p *part, seq uint64, timeout time.Duration, mark uint64, at loadsAt) (server.Viewer, bool) {
	if !f.enabled() {
		return nil, false
	}
	fl := f.cur.Load()
	if fl == nil {
		f.want()
		return nil, false
	}
	need := max(seq, p.floor.Load())
	if fl.wait(ctx, need, timeout) {
		f.replies.Add(1)
		loads := uint64(0)
		if at.fl == fl {
			loads = at.loads
		}
		return followed{fl: fl, st: fl.st, removals: f.r.Removals, mark: mark, need: need, loads: loads, known: at.fl == fl}, true
	}
	p.raise(fl.st.Applied())
	return nil, false
}

// loadsAt is the running follower and its store's count of loads, read
// before a request's removals' mark.
type loadsAt struct {
	fl    *follower
	loads uint64
}

// loadsBefore returns the running follower and its count of loads; the
// caller takes the removals' mark after it.
func (f *following) loadsBefore() loadsAt {
	if !f.enabled() {
		return loadsAt{}
	}
	fl := f.cur.Load()
	if fl == nil {
		return loadsAt{}
	}
	return loadsAt{fl: fl, loads: fl.st.Stats().Loads}
}

// ready reports whether the follower store answers a request at once,
// with no read of the stream's state to make first (followed).
func (f *following) ready(p *part, seq uint64) bool {
	if f == nil {
		return false
	}
	fl := f.cur.Load()
	need := max(seq, p.floor.Load())
	return fl != nil && fl.st.Applied() >= need && f.r.Removals.Covered(need)
}

// loaded reports whether the follower store answers the session from
// memory now, with no proof of the removals to make first
// (store.Shown).
func (f *following) loaded(session string) bool {
	if f == nil {
		return false
	}
	fl := f.cur.Load()
	return fl != nil && fl.st.Shown(session)
}

// followed shows a session of the follower store. The follower applies
// a record once every removal made before it was stored has been
// applied (cover), as the ingest does. A view covers the sequence the
// request needs (its min_seq, or the floor) too. A view that would show
// a state of the session no reply showed before covers the store's
// watermark: every record the state holds was stored before it, so a
// removal not applied yet was made after each of them, and the state is
// what the stream held before it. That holds of what the records
// applied made, and costs no read of the stream's state (they were
// covered as they were applied); a load reads the stream, and may meet
// a removal half way (a snapshot from before it, the records after it)
// with no record stored after the removal. So when the store loaded a
// session since the last request that proved the removals made before
// it came (follower.clean), the view proves first that every removal
// made before the request came, and before the records it shows were
// stored, has been applied (store.ViewSettled, removals.settleSince; one
// read of the stream's state serves both), as a reader's that reads the
// session now does. Either proof reaches the sequence the watcher
// verified, past every record the follower applied: the view that
// follows finds the session within it, however fast its records come. A
// session shown again as it was costs no proof.
type followed struct {
	fl       *follower
	st       *store.Store
	removals Removals
	mark     uint64 // the removals' mark when the request came
	need     uint64 // the sequence the request needs
	// loads is the store's count of loads before mark was taken; known
	// says it was read of this follower.
	loads uint64
	known bool
}

func (v followed) View(ctx context.Context, session string, fn func(p *projection.Session)) error {
	v.removals.Cover(v.need)
	return v.st.ViewSettled(ctx, session, func(ctx context.Context, seen uint64) (uint64, error) {
		// A load after a removal reads past what the follower applied
		// (store's records on their way): the proof reaches what it read.
		upTo := max(v.st.Applied(), seen)
		if v.known && v.st.Stats().Loads <= v.fl.clean.Load() {
			v.removals.Cover(upTo)
			// A session the cover forgot loads when it is viewed
			// again: the proof of the mark is made first.
			if v.st.Stats().Loads <= v.fl.clean.Load() && v.st.Loaded(session) {
				// Proven past upTo, most often: the check's read began
				// after the records applied when it was asked for.
				return max(upTo, v.removals.Verified()), nil
			}
		}
		proven, err := v.removals.SettleSince(ctx, v.mark, upTo)
		if err != nil {
			return upTo, err
		}
		if v.known {
			// Every load that ended before mark met no removal that
			// is not applied now.
			for {
				cur := v.fl.clean.Load()
				if v.loads <= cur || v.fl.clean.CompareAndSwap(cur, v.loads) {
					break
				}
			}
		}
		return proven, nil
	}, fn)
}

// stores returns the follower's store, and that of a follower being
// started: the removals concern them.
func (f *following) stores() []*store.Store {
	var out []*store.Store
	if f == nil {
		return nil
	}
	if fl := f.cur.Load(); fl != nil {
		out = append(out, fl.st)
	}
	f.mu.Lock()
	if f.starting != nil {
		out = append(out, f.starting)
	}
	f.mu.Unlock()
	return out
}

// stats returns the followers' counters: loads and evictions of every
// follower store, the gauges of the running one's.
func (f *following) stats() (out store.Stats) {
	if f == nil {
		return out
	}
	f.mu.Lock()
	out = f.retired
	f.mu.Unlock()
	if fl := f.cur.Load(); fl != nil {
		s := fl.st.Stats()
		out.Loads += s.Loads
		out.SnapshotLoads += s.SnapshotLoads
		out.Evictions += s.Evictions
		out.Sessions, out.Loaded, out.Bytes = s.Sessions, s.Loaded, s.Bytes
		out.FollowerApplied = s.Applied
	}
	return out
}

// applyRecord applies one stored record to its session in st (nil: none,
// the record is dropped), or rejects it when its subject names no
// session.
func applyRecord(st *store.Store, m bus.Msg) {
	if st == nil {
		return
	}
	session, err := subject.SessionOf(m.Subject, subject.TranscriptsPrefix)
	if err != nil {
		st.Reject(store.Rejection{Subject: m.Subject, Seq: m.Seq, Size: len(m.Data), Reason: err.Error(), Kind: store.KindSubject})
		return
	}
	st.Apply(session, m.Seq, m.Data)
}
