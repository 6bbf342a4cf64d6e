package rebuild

import (
	"sync"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
)

// Session is one session's rebuilt projection.
type Session struct {
	Proj *projection.Session
	From uint64 // sequence of its latest compaction it restarted from; 0 when none

	lim    store.Limits
	dec    record.Decoder
	weight int64 // bytes of records since From (store.Limits.Weigh)
}

// NewSession returns a session with nothing applied, that takes records
// under lim as the service does.
func NewSession(opt projection.Options, lim store.Limits) *Session {
	return &Session{Proj: projection.New(opt), lim: lim, dec: lim.Decoder()}
}

// Add decodes and applies the session's record at stream sequence seq as
// the service does: a record that does not decode is skipped, one that
// would take the session past the session bound is quarantined (skipped),
// and only a compaction within the bound restarts the session.
func (s *Session) Add(seq uint64, data []byte) {
	v, err := s.dec.Decode(data)
	if err != nil {
		s.Proj.Skip(seq)
		return
	}
	resets := s.lim.Resets(v, len(data))
	w, err := s.lim.Weigh(s.weight, len(data), resets)
	if err != nil {
		s.Proj.Skip(seq)
		return
	}
	s.weight = w
	if resets {
		s.From = seq
	}
	s.Proj.Apply(seq, v)
}

// Checkpoint returns the session's checkpoint.
func (s *Session) Checkpoint() store.Checkpoint {
	return store.Checkpoint{From: s.From, Seq: s.Proj.Seq()}
}

// Records are handed to the workers in batches, so that a channel send
// and a wake-up are paid once for many records; a worker keeps at most
// shardQueue batches waiting, which bounds the records held in flight.
const (
	batchSize  = 256
	shardQueue = 8
)

// Projections rebuilds whole projections on worker goroutines while the
// caller reads the stream: decoding dominates the cost, and sessions are
// independent, so each session belongs to one worker (by a hash of its
// id), which decodes and applies its records in the order they were
// added.
type Projections struct {
	shards []*shard
	wg     sync.WaitGroup
}

type pending struct {
	session string
	seq     uint64
	data    []byte
}

type shard struct {
	opt      projection.Options
	lim      store.Limits
	batch    []pending // being filled by Add
	in       chan []pending
	sessions map[string]*Session // owned by the worker until Close
}

// NewProjections starts workers (at least one) that rebuild with opt,
// under lim.
func NewProjections(opt projection.Options, lim store.Limits, workers int) *Projections {
	p := &Projections{shards: make([]*shard, max(workers, 1))}
	for i := range p.shards {
		sh := &shard{opt: opt, lim: lim, in: make(chan []pending, shardQueue), sessions: map[string]*Session{}}
		p.shards[i] = sh
		p.wg.Go(sh.run)
	}
	return p
}

// Add queues the session's record at stream sequence seq. data is read
// later, on a worker: it must not change afterwards. Add is not safe for
// concurrent use.
func (p *Projections) Add(session string, seq uint64, data []byte) {
	sh := p.shards[shardOf(session, len(p.shards))]
	sh.batch = append(sh.batch, pending{session, seq, data})
	if len(sh.batch) == batchSize {
		sh.in <- sh.batch
		sh.batch = make([]pending, 0, batchSize)
	}
}

// Close applies what is queued, stops the workers and returns every
// session rebuilt.
func (p *Projections) Close() map[string]*Session {
	for _, sh := range p.shards {
		if len(sh.batch) > 0 {
			sh.in <- sh.batch
			sh.batch = nil
		}
		close(sh.in)
	}
	p.wg.Wait()
	out := map[string]*Session{}
	for _, sh := range p.shards {
		for id, s := range sh.sessions {
			out[id] = s
		}
	}
	return out
}

func (sh *shard) run() {
	for batch := range sh.in {
		for _, r := range batch {
			s := sh.sessions[r.session]
			if s == nil {
				s = NewSession(sh.opt, sh.lim)
				sh.sessions[r.session] = s
			}
			s.Add(r.seq, r.data)
		}
	}
}

// shardOf spreads sessions over n workers with FNV-1a.
func shardOf(session string, n int) int {
	if n == 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(session); i++ {
		h ^= uint32(session[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}
