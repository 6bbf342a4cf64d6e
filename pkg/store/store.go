// Package store holds the live projection of every session: the ingest
// applies records to it in stream order, and readers render a session's
// context once it has caught up with the sequence they need.
//
// Sessions are loaded lazily and held in a cache bounded by count and by
// bytes. A session's projection is a function of its records from its
// latest valid compaction on, so a session that is not in the cache (never
// loaded, or evicted) needs only two numbers: the sequence of its latest
// valid compaction and of its last record. The ingest keeps those up to
// date without loading anything; a reader that needs the session loads it
// through the Loader, from the stream, which is the source of truth. The
// store writes each session's checkpoint (the two numbers) behind the
// ingest: a missing or old one only makes a load read more records.
//
// The store remembers the two numbers of at most MaxKnown sessions. Past
// that it forgets the least recently used of those it need not keep: not
// loaded, not being loaded, with a checkpoint written at their latest
// compaction and no record quarantined for failing. A forgotten session
// loads from its checkpoint, as one the store never met.
//
// A Store is safe for concurrent use. It is built of rooms, each with one
// job and its own lock: the directory of sessions (sessions.go) and each
// session's slot, the cache of loaded projections and its eviction
// (cache.go), the watermark and its waiters (watermark.go), the checkpoint
// writer (checkpoints.go), the rejected records (rejects.go). A slot's
// lock is taken before the cache's or the directory's; those only try a
// slot's lock. A load reads the stream without the session's lock
// (load.go), so applying to a session never waits for a load, of it or of
// another, nor for a render of another; a reader waiting for a sequence
// holds no lock at all. The ingest's way in is apply.go, the readers'
// view.go (and reach.go for stores no ingest feeds); removed.go forgets
// what the stream's removals took.
package store

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/pkg/checkpoint"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

// ErrWaitExpired is returned by Wait when the store did not reach the
// sequence in time.
var ErrWaitExpired = errors.New("store: projection did not reach the requested sequence in time")

// Defaults of a Store.
const (
	DefaultRejectLog       = 1000
	DefaultMaxSessions     = 10000
	DefaultMaxBytes        = 1 << 30 // 1 GiB of cached projections
	DefaultMaxSessionBytes = 256 << 20
	DefaultLoadTimeout     = 10 * time.Second
	DefaultSaveTimeout     = 10 * time.Second
	DefaultMaxKnown        = 100_000
	DefaultMissTTL         = 2 * time.Second
)

// Loader reads what the store does not hold: a session's checkpoint and
// its records. Package bus provides one over JetStream. A Loader that
// also implements SeqLoader reads records by their sequences, which is
// faster when a session's records are spread over a large stream.
type Loader interface {
	// Checkpoint returns the session's stored checkpoint; ok is false when
	// there is none.
	Checkpoint(ctx context.Context, session string) (cp Checkpoint, ok bool, err error)
	// SaveCheckpoint stores the session's checkpoint before returning,
	// unless the one stored is as new (Checkpoint.Newer): it never
	// replaces a stored checkpoint with an older one. The store writes
	// checkpoints behind the ingest, and in batches when the Loader is a
	// BatchSaver.
	SaveCheckpoint(ctx context.Context, session string, cp Checkpoint) error
	// Records calls fn for each record of the session with a stream
	// sequence in [from, to], in order.
	Records(ctx context.Context, session string, from, to uint64, fn func(seq uint64, data []byte) error) error
}

// SeqLoader reads records by stream sequence.
type SeqLoader interface {
	// RecordsAt calls fn for the session's records at the given
	// sequences, in order. A sequence that holds no record, or a record
	// of another session, fails the read with an error wrapping
	// ErrIndexStale: the store then reads the session's subject instead.
	RecordsAt(ctx context.Context, session string, seqs []uint64, fn func(seq uint64, data []byte) error) error
}

// ErrIndexStale is wrapped by a SeqLoader's error when a sequence it was
// asked for holds no record of the session: the index it read by is
// wrong (a stored one tampered with, or records deleted since).
var ErrIndexStale = checkpoint.ErrIndexStale

// Prover is a SeqLoader that can prove a stored record index complete.
// A checkpoint's index is a hint: reading its sequences proves each is a
// record of the session (RecordsAt), not that it lists them all. A load
// by a checkpoint's index counts the session's records in the stream
// from the index's first on, while it reads them: the index is used only
// when the count is what the load read, the index's records and those
// after it (see readStored). A Loader that is not a Prover never loads
// by a checkpoint's index.
type Prover interface {
	// CountRecords returns how many records of the session the stream
	// holds with a sequence at or after from, as the replica that
	// answers holds them: a replica behind counts fewer, never more.
	CountRecords(ctx context.Context, session string, from uint64) (uint64, error)
	// StreamLast returns the stream's last sequence, as its leader says
	// it: a checkpoint past it is wrong, and replaced.
	StreamLast(ctx context.Context) (uint64, error)
}

// ErrIndexIncomplete is wrapped by a load's error when a stored record
// index is not proven to list every record of the session it covers:
// the stream holds more of them than it lists (it leaves some out), or
// the count could not be taken. The load then reads the session's
// subject instead, and replaces the checkpoint.
var ErrIndexIncomplete = errors.New("store: the record index is not proven to list every record of the session")

// DefaultMaxIndexed bounds the record sequences the store remembers across
// all sessions (8 bytes each) so loads can read records by sequence.
const DefaultMaxIndexed = 8 << 20

// maxIndexedPerSession bounds one session's remembered sequences.
const maxIndexedPerSession = 1 << 16

// Store is the set of live session projections.
type Store struct {
	// Options configure every session's projection.
	Options projection.Options
	// Decoder decodes records; its limits apply to every record. With
	// ShareInput, the data handed to Apply and by the Loader must never
	// change afterwards: the projections may keep parts of it.
	Decoder record.Decoder
	// Loader loads sessions that are not cached; nil keeps every session
	// in memory for good (nothing is evicted).
	Loader Loader
	// MaxSessions and MaxBytes bound the cache of loaded sessions; the
	// least recently used are evicted past either.
	MaxSessions int
	MaxBytes    int64
	// MaxSessionBytes bounds one session's projection: a record that
	// would take it past this is quarantined, not applied.
	MaxSessionBytes int64
	// Fresh says the stream held no record when the store started, so the
	// ingest meets every record of every session: a session it meets is
	// complete from its first record, and loads by sequence.
	Fresh bool
	// MaxKnown bounds the sessions the store remembers, loaded or not:
	// past it, it forgets the least recently used of those it need not
	// keep (see Store). A forgotten session loads again, from its
	// checkpoint, when it is asked for.
	MaxKnown int
	// MaxIndexed bounds the record sequences remembered across sessions;
	// a session past the bound loads by scanning its subject instead.
	MaxIndexed int64
	// LoadTimeout bounds a load's reads, within the reader's context: a
	// read that gets no answer fails the load, never holds it for good.
	LoadTimeout time.Duration
	// SaveTimeout bounds one write of a batch of checkpoints; a batch not
	// written is written again later.
	SaveTimeout time.Duration
	// MissTTL is how long a session found without records is remembered
	// as such (misses.go): asked again meanwhile, it costs no read. 0
	// remembers none.
	MissTTL time.Duration
	// RejectLog is how many rejected records are kept for listing.
	RejectLog int
	// SubjectOf names the subject a session's record at seq is stored
	// on, for the rejections; nil names transcripts.<session>, the
	// subject records are published to (and stored on, unpartitioned).
	SubjectOf func(session string, seq uint64) string
	// Logger receives a line per rejected record and per failed
	// checkpoint write; New sets one that discards them.
	Logger *slog.Logger

	// EvictSnapshots, when set, has the store write the snapshot of each
	// session the cache evicts, behind the eviction (evicted.go): the
	// session comes back from it and the records after it, not from
	// every record since its compaction. It returns the stream's
	// identity and the removed count to write them at, as CloseSnapshots
	// takes them; ok false writes none.
	EvictSnapshots func() (stream string, removed uint64, ok bool)
	// SnapshotsWritten, when set, is called after snapshots of evicted
	// sessions were written at removed, by the goroutine that wrote
	// them: App records what they were written at, and empties the
	// bucket when records left the stream meanwhile.
	SnapshotsWritten func(ctx context.Context, removed uint64)

	dir         directory
	cache       cache
	checkpoints checkpointWriter
	evictSnaps  evictWriter
	indexed     atomic.Int64  // sequences held in all slots' seqs
	way         onTheirWay    // records a removal took that may still come (removed.go)
	delivered   atomic.Uint64 // the latest sequence given to Apply: records come in stream order
	byCatch     atomic.Bool   // fed by Catch (reach.go), not by Apply: nothing is on its way

	watermark // the watermark and its waiters
	rejects   *rejectLog
	stats     struct{ records, duplicates atomic.Uint64 }

	// applyHook, when set, applies records in place of
	// projection.Session.Apply: tests make projections fail with it.
	applyHook func(p *projection.Session, seq uint64, v any)

	// shapes keeps the readers Apply decodes records to
	// projection.Shape with (see decode).
	shapes sync.Pool
}

// slot is one session: its projection when loaded, and always the two
// sequences that let it be loaded.
type slot struct {
	mu sync.Mutex
	id string

	proj   *projection.Session // nil when not loaded
	size   int64               // estimated bytes of the loaded projection
	held   int64               // bytes of what its projection holds (projection.Session.Keep)
	weight int64               // bytes of records since the latest compaction
	elem   *list.Element       // in the cache's order while loaded
	moved  uint64              // the cache's moves when it put the slot at the back

	from uint64 // latest valid compaction seen (0: unknown)
	seq  uint64 // last record seen
	// fromKnown says from is the latest valid compaction: the session's
	// records were all seen since the store started, or its checkpoint
	// was read.
	fromKnown bool

	// saved is the From of the session's checkpoint known to be
	// written: past it, the slot may be forgotten.
	saved uint64
	// savedSeq is the Seq of the checkpoint known to be written: a
	// shutdown writes no checkpoint where from and seq are both written.
	savedSeq uint64
	// snapped is the last record of the snapshot written of the
	// session, 0 when none is, and snappedAt the stream's removed count
	// it was written at (a removal empties the bucket); idleSeq is its
	// last record as the latest round of WriteIdleSnapshots found it.
	snapped, snappedAt, idleSeq uint64

	// seqs lists every record of the session from its latest compaction
	// on, when indexed is true: a load reads exactly these. An index
	// starts at a record past the watermark, from where the ingest meets
	// every record of the session, in order.
	seqs    []uint64
	indexed bool
	// marked says the checkpoint writer was told the index grew, and
	// has not yet asked for it.
	marked bool

	// replaces is the key of the session's stored checkpoint a load
	// found wrong: every checkpoint of the slot replaces it, until one
	// is written.
	replaces string

	// quarantined lists the session's records since its latest
	// compaction that failed to apply, in order: a load never applies
	// them. Those past the session bound are not kept: a load finds them
	// again.
	quarantined []uint64

	// shown is the highest sequence ViewSettled showed of the session.
	shown uint64
	// loading is the load in progress, reading without the lock.
	loading *loading
	// recent says the slot was used since the directory's last pass.
	recent bool
	// dead says the slot was removed from the store: look the session
	// up again.
	dead bool
	hand *list.Element // in the directory's order
}

// Stats counts what a store has seen.
type Stats struct {
	Records    uint64 `json:"records"`    // records taken in: applied, or noted for a session not loaded
	Duplicates uint64 `json:"duplicates"` // records met again (redelivered) and ignored
	Rejected   uint64 `json:"rejected"`   // records skipped as undecodable, misaddressed or poison
	// RejectedBy counts the rejected records by Rejection.Kind.
	RejectedBy map[string]uint64 `json:"rejected_by,omitempty"`
	Sessions   uint64            `json:"sessions"` // sessions remembered: loaded, or by their sequences
	Loaded     int64             `json:"loaded"`   // sessions held in the cache
	Bytes      int64             `json:"bytes"`    // their estimated size
	Loads      uint64            `json:"loads"`    // sessions loaded from the stream
	// SnapshotLoads counts the loads that started from a snapshot.
	SnapshotLoads uint64 `json:"snapshot_loads"`
	Evictions     uint64 `json:"evictions"` // sessions evicted from the cache
	Applied       uint64 `json:"applied"`   // stream sequence watermark
	// FollowerReplies, StreamProbes and FollowerApplied are the
	// instance's, not a store's (package app fills them in): the requests
	// answered from the follower's store, the probes of the stream for a
	// session's last record that requests made, and the follower's
	// watermark (0 while none runs).
	FollowerReplies uint64 `json:"follower_replies"`
	StreamProbes    uint64 `json:"stream_probes"`
	FollowerApplied uint64 `json:"follower_applied"`
}

// New returns an empty store with the defaults.
func New() *Store {
	s := &Store{
		RejectLog:       DefaultRejectLog,
		MaxSessions:     DefaultMaxSessions,
		MaxBytes:        DefaultMaxBytes,
		MaxSessionBytes: DefaultMaxSessionBytes,
		MaxIndexed:      DefaultMaxIndexed,
		LoadTimeout:     DefaultLoadTimeout,
		SaveTimeout:     DefaultSaveTimeout,
		Logger:          slog.New(slog.DiscardHandler),
		MaxKnown:        DefaultMaxKnown,
		MissTTL:         DefaultMissTTL,
	}
	s.rejects = new(rejectLog)
	s.watermark.init()
	s.dir.init()
	s.checkpoints.init()
	s.checkpoints.write = s.writeCheckpoints
	s.checkpoints.resolve = s.indexCheckpoints
	s.checkpoints.every = DefaultIndexEvery
	s.checkpoints.written = s.checkpointsWritten
	s.checkpoints.logger = func() *slog.Logger { return s.Logger }
	return s
}

// Applied returns the watermark: every stream sequence up to it has been
// applied or rejected.
func (s *Store) Applied() uint64 { return s.watermark.get() }

// Advance moves the watermark to seq, when that is forward, and wakes the
// readers waiting for it. The ingest calls it for every stream sequence it
// has dealt with, in order.
func (s *Store) Advance(seq uint64) { s.watermark.advance(seq) }

// Wait returns once every stream sequence up to seq has been applied, or
// ErrWaitExpired after timeout, or the context's error. It returns at once
// when the store is already there.
func (s *Store) Wait(ctx context.Context, seq uint64, timeout time.Duration) error {
	return s.watermark.wait(ctx, seq, timeout)
}

// slot returns the session's slot, or nil; with create, a slot the
// ingest met is added when there is none.
func (s *Store) slot(session string, create bool) *slot {
	if !create {
		return s.dir.get(session)
	}
	return s.dir.getOrAdd(session, func(sl *slot) {
		switch {
		case s.Loader == nil:
			// Nothing to load from: the store sees every record.
			sl.proj, sl.fromKnown = projection.New(s.Options), true
			s.cache.add(sl)
		case s.Fresh && !s.dir.forgot.Load():
			// The store has met every record of the stream, and has
			// forgotten none of a session: this is its first.
			sl.fromKnown, sl.indexed = true, true
		}
	})
}

// complete reports whether every session with a record up to the
// watermark has a slot, so that a session without one has no records: the
// store met every record of the stream from the first (Fresh), adding a
// slot for each before the watermark passed it, and has forgotten no slot
// that held records since. (A slot removed by a load that found no
// records held none.) Unknown sessions are then answered without reading
// the stream, however many are asked for.
func (s *Store) complete() bool { return s.Fresh && !s.dir.forgot.Load() }

// metByReader returns the session's slot, adding one that knows nothing
// of the session when there is none.
func (s *Store) metByReader(session string) *slot {
	return s.dir.getOrAdd(session, func(*slot) {})
}

// lockSlot returns the session's slot, created when new, locked.
func (s *Store) lockSlot(session string) *slot {
	for {
		sl := s.slot(session, true)
		sl.mu.Lock()
		if !sl.dead {
			return sl
		}
		sl.mu.Unlock() // removed meanwhile: a new one takes its place
	}
}

// remove forgets a slot; it is locked, holds no projection and no load.
func (s *Store) remove(sl *slot) {
	s.dropIndex(sl)
	s.dir.remove(sl)
}

// forgettable reports whether a slot holds nothing a load would not find
// again: no projection, no load in progress, no record quarantined for
// failing, and a checkpoint written at its latest compaction (none is
// needed before the first). If so it lets go of the slot's index. The
// slot is locked.
//
// A forgotten session is met again as one the store knows nothing of: it
// loads from its checkpoint, by scanning its subject, never from an index
// that would start at the record the store met again.
func (s *Store) forgettable(sl *slot) bool {
	if sl.proj != nil || sl.loading != nil || sl.pinned() || (sl.fromKnown && sl.saved < sl.from) {
		return false
	}
	s.dropIndex(sl)
	return true
}

// forget has the directory forget slots when it holds more than MaxKnown
// and enough happened since its last pass (slots met, checkpoints
// written) to make another worth its cost, or when now says so.
func (s *Store) forget(now bool) {
	if s.Loader == nil || s.MaxKnown <= 0 || s.dir.n.Load() <= int64(s.MaxKnown) {
		return
	}
	if now || s.dir.credit.Load() > int64(s.MaxKnown/10) {
		s.dir.sweep(s.MaxKnown, s.forgettable)
	}
}

// checkpointsWritten notes the checkpoints written, which may let their
// slots be forgotten; idle says the writer has nothing left to write.
func (s *Store) checkpointsWritten(batch map[string]Checkpoint, idle bool) {
	for id, cp := range batch {
		if sl := s.dir.get(id); sl != nil {
			sl.mu.Lock()
			if cp.Seq >= sl.savedSeq {
				sl.saved, sl.savedSeq = max(sl.saved, cp.From), cp.Seq
			}
			if cp.Replaces() == sl.replaces {
				sl.replaces = ""
			}
			sl.mu.Unlock()
		}
	}
	s.dir.credit.Add(int64(len(batch)))
	s.forget(idle)
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		Records:       s.stats.records.Load(),
		Duplicates:    s.stats.duplicates.Load(),
		Rejected:      s.rejects.count.Load(),
		RejectedBy:    s.rejects.byKind(),
		Sessions:      uint64(s.dir.n.Load()),
		Loaded:        s.cache.n.Load(),
		Bytes:         s.cache.bytes.Load(),
		Loads:         s.cache.loads.Load(),
		SnapshotLoads: s.cache.snapLoads.Load(),
		Evictions:     s.cache.evictions.Load(),
		Applied:       s.watermark.get(),
	}
}

// resize counts a loaded slot at what its projection holds now
// (projection.Session.Size): the messages it keeps, which are not every
// record it applied (a trimmed screenshot's images are let go), and the
// renderings it cached. The slot is locked.
func (s *Store) resize(sl *slot) {
	if sl.proj == nil {
		return
	}
	size := sl.proj.Size()
	s.cache.grow(size - sl.size)
	sl.size = size
}

// setIndex makes seqs the slot's record index, within the global bound;
// the slot is locked.
func (s *Store) setIndex(sl *slot, seqs []uint64) {
	s.indexed.Add(int64(len(seqs) - len(sl.seqs)))
	sl.seqs, sl.indexed = append(sl.seqs[:0], seqs...), true
	if s.indexed.Load() > s.MaxIndexed || len(seqs) > maxIndexedPerSession {
		s.dropIndex(sl)
	}
}

// index adds a record to an indexed slot; the slot is locked.
func (s *Store) index(sl *slot, seq uint64) {
	if !sl.indexed {
		return
	}
	if s.indexed.Load() >= s.MaxIndexed || len(sl.seqs) >= maxIndexedPerSession {
		s.dropIndex(sl) // loads of this session scan its subject
		return
	}
	sl.seqs = append(sl.seqs, seq)
	s.indexed.Add(1)
}

// markIndex tells the checkpoint writer that an indexed slot's index
// changed; the slot is locked.
func (s *Store) markIndex(sl *slot) {
	if s.Loader == nil || sl.marked {
		return
	}
	sl.marked = true
	s.checkpoints.mark(sl.id)
}

// checkpointOf returns a slot's checkpoint, with its index when it has
// one within MaxCheckpointSeqs; the slot is locked.
func (s *Store) checkpointOf(sl *slot) Checkpoint {
	cp := Checkpoint{From: sl.from, Seq: sl.seq}
	if sl.indexed {
		cp = cp.WithSeqs(sl.seqs)
	}
	return cp.Replacing(sl.replaces, false)
}

// indexCheckpoints returns the checkpoints of marked sessions, for the
// checkpoint writer.
func (s *Store) indexCheckpoints(ids map[string]struct{}) map[string]Checkpoint {
	out := make(map[string]Checkpoint, len(ids))
	for id := range ids {
		sl := s.dir.get(id)
		if sl == nil {
			continue // forgotten meanwhile
		}
		sl.mu.Lock()
		sl.marked = false
		if !sl.dead && sl.fromKnown {
			out[id] = s.checkpointOf(sl)
		}
		sl.mu.Unlock()
	}
	return out
}

func (s *Store) dropIndex(sl *slot) {
	s.indexed.Add(-int64(len(sl.seqs)))
	sl.seqs, sl.indexed = nil, false
}

// evict unloads the least recently used sessions while the cache is over
// either bound.
func (s *Store) evict() {
	if s.Loader == nil {
		return
	}
	var gone func(sl *slot)
	if s.EvictSnapshots != nil && s.cache.over(s.MaxSessions, s.MaxBytes) {
		if stream, removed, ok := s.EvictSnapshots(); ok {
			gone = func(sl *slot) { s.evicting(sl, stream, removed) }
		}
	}
	s.cache.evict(s.MaxSessions, s.MaxBytes, gone)
}

// Evict drops a session's projection from memory, as the cache does for
// the least recently used; the next reader loads it again.
func (s *Store) Evict(session string) {
	sl := s.slot(session, false)
	if sl == nil || s.Loader == nil {
		return
	}
	sl.mu.Lock()
	if sl.proj != nil {
		s.cache.drop(sl)
		s.cache.evictions.Add(1)
	}
	sl.mu.Unlock()
}

// Sessions returns the ids of the sessions known.
func (s *Store) Sessions() []string { return s.dir.ids() }

// subjectOf names the subject a session's record at seq is stored on.
func (s *Store) subjectOf(session string, seq uint64) string {
	if s.SubjectOf != nil {
		return s.SubjectOf(session, seq)
	}
	return subject.TranscriptsPrefix + session
}
