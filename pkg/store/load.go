package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ctxd/ctxd/pkg/projection"
)

// A load builds a session's projection from the stream, the source of
// truth: from the session's latest compaction known (its checkpoint, when
// the store has not seen one) up to every record the store has taken in.
// It reads without the session's lock, so neither the ingest nor the
// readers of other sessions wait for the stream; the ingest keeps what it
// applies to the session meanwhile for the load, which applies it under
// the lock before it shows the projection. So a projection shown always
// holds exactly the session's records up to its sequence.

// loading is a load in progress: how far it reads, and what the ingest
// met of the session past that.
type loading struct {
	done    chan struct{} // closed when the load ends
	to      uint64        // the load reads the session's records up to here
	pending []noted       // the session's records past to, in order
	// forgotten says records were removed from the stream while the
	// load read (Store.Forget): it reads again.
	forgotten bool
}

// wait returns once the load has ended, or with ctx's error naming the
// session whose load it waited for.
func (ld *loading) wait(ctx context.Context, session string) error {
	select {
	case <-ld.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("store: load %s: %w", session, ctx.Err())
	}
}

// noted is a record of a session being loaded, as the ingest met it.
type noted struct {
	seq    uint64
	skip   bool // it does not decode
	v      any
	n      int
	resets bool
}

// errReadPast: a load by the session's index is to read past the
// watermark (removed.go); it reads the subject instead.
var errReadPast = errors.New("the load reads past the watermark")

// maxLoadAttempts bounds the reads of one load: a record that breaks the
// projection is quarantined, and the load reads again without it.
const maxLoadAttempts = 4

// load builds the slot's projection. It is called with the slot locked
// and not loading, and returns with it locked; the lock is let go while
// the load reads.
func (s *Store) load(ctx context.Context, sl *slot) error {
	ld := &loading{done: make(chan struct{})}
	sl.loading = ld
	defer func() {
		sl.loading = nil
		close(ld.done)
	}()
	ctx, cancel := context.WithTimeout(ctx, s.LoadTimeout)
	defer cancel()
	sr, bySeq := s.Loader.(SeqLoader)
	sv, snaps := s.Loader.(SnapshotLoader)
	pv, proves := s.Loader.(Prover)
	scan := false     // an index did not hold: read the subject
	distrust := false // the checkpoint's From is not a compaction: ignore it
	// wrong is the stored checkpoint found wrong, which the load's
	// replaces once it has loaded.
	var wrong *Checkpoint
	past := false // wrong for lying past the stream's end
	for attempt := 1; ; attempt++ {
		// Every record up to the watermark is stored, and so is every
		// record this session has seen: the ingest notes it before moving
		// the watermark. Later ones the ingest keeps for this load. A load
		// by index reads the records the session has seen, and keeps
		// every later one.
		ld.to, ld.pending = max(s.watermark.get(), sl.seq), nil
		start, fromKnown := sl.from, sl.fromKnown
		known := slices.Clone(sl.quarantined)
		var seqs []uint64
		byIndex := bySeq && sl.indexed && !scan
		if byIndex {
			seqs = slices.Clone(sl.seqs)
			ld.to = sl.seq
		}
		// A session evicted with its snapshot written comes back from it
		// (evicted.go).
		snappedIndexed := byIndex && fromKnown && snaps && !distrust && sl.snapped != 0 && sl.snapped <= sl.seq
		sl.mu.Unlock()

		var b *build
		readTo := ld.to      // what the read reaches: past ld.to after a removal (removed.go)
		var wayEnd uint64    // the stream's end read after a removal, when one may have records on their way
		var saved uint64     // the checkpoint's From, when read
		var read *Checkpoint // the checkpoint, when there is one
		var stored []uint64  // the checkpoint's sequences the load reads
		var storedTo uint64  // the checkpoint's Seq, when they are all read
		var snap *restored   // the snapshot the load starts from
		err := func() error {
			var prover Prover
			if proves {
				prover = pv
			}
			end, err := s.wayEnd(ctx, prover)
			if err != nil {
				return err
			}
			wayEnd = end
			if end > readTo {
				if byIndex {
					return errReadPast
				}
				readTo = end
			}
			if !fromKnown {
				var snapped <-chan fetched
				if snaps && bySeq && !scan && !distrust {
					// Read beside the checkpoint: one round trip for both.
					snapped = fetchSnapshot(ctx, sv, sl.id)
				}
				cp, ok, err := s.Loader.Checkpoint(ctx, sl.id)
				if errors.Is(err, ErrBadCheckpoint) {
					s.Logger.Warn("checkpoint does not decode; the session loads from its subject's start", "session", sl.id, "err", err)
					cp, ok, err = Checkpoint{}, false, nil
				}
				if err != nil {
					return err
				}
				if ierr := cp.IndexError(); ok && ierr != nil {
					s.Logger.Warn("checkpoint's record index dropped; the session loads from its subject", "session", sl.id, "err", ierr)
				}
				if ok {
					c := cp
					read = &c
				}
				if ok && cp.Seq > readTo && proves {
					// Ahead of the ingest (a rebuild writes at the
					// stream's end), or past the stream's end: a
					// checkpoint no writer could write, which would
					// never give way to a right one. Not knowing
					// which, the load goes on: what of the index it
					// reads is proven all the same.
					last, err := pv.StreamLast(ctx)
					switch {
					case err != nil:
						if ctx.Err() == nil {
							s.Logger.Warn("the stream's last sequence could not be read, to check a checkpoint past the records applied", "session", sl.id, "seq", cp.Seq, "err", err)
						}
					case cp.Seq > last:
						s.Logger.Warn("checkpoint's last record lies past the stream's end; its record index is not used, and the checkpoint is replaced", "session", sl.id, "seq", cp.Seq, "stream_last", last)
						wrong, past = read, true
						cp = cp.WithoutIndex()
					}
				}
				// A checkpoint past what the load reads (written by a
				// rebuild at the stream's end, ahead of the ingest) would
				// start the read after the records it must hold.
				if ok && cp.From <= readTo && !distrust {
					saved, start = cp.From, max(start, cp.From)
					if idx, err := cp.Seqs(); err != nil {
						s.Logger.Warn("checkpoint's record index dropped; the session loads from its subject", "session", sl.id, "err", err)
					} else if bySeq && proves && !scan && start == cp.From && idx != nil {
						stored = upTo(idx, readTo)
						if len(stored) == len(idx) {
							storedTo = cp.Seq
						}
					}
				}
				if snapped != nil {
					snap = s.useSnapshot(ctx, <-snapped, sl.id, cp, ok, readTo)
				}
			}
			if snappedIndexed {
				if snap = s.useIndexedSnapshot(ctx, <-fetchSnapshot(ctx, sv, sl.id), sl.id, start, seqs, readTo); snap != nil {
					return s.readIndexAfterSnapshot(ctx, sr, sl.id, snap, seqs, known, &b)
				}
			}
			if snap != nil {
				return s.readAfterSnapshot(ctx, sr, pv, sl.id, snap, stored, readTo, known, &b)
			}
			b = s.newBuild(sl.id, start, known)
			if saved != 0 && start == saved {
				b.expect = saved
			} else if fromKnown && start > 0 {
				// The compaction remembered must still be there: one
				// removed from the stream, and not told yet, would leave
				// the records after it without those before.
				b.expect = start
			}
			if byIndex {
				return sr.RecordsAt(ctx, sl.id, seqs, b.addData)
			}
			if len(stored) > 0 {
				return s.readStored(ctx, sr, pv, sl.id, stored, start, readTo, b)
			}
			return s.Loader.Records(ctx, sl.id, start, readTo, b.addData)
		}()

		sl.mu.Lock()
		if ld.forgotten {
			// What the read found may hold records removed meanwhile,
			// and the checkpoint may name them: read again, as a
			// session the store knows nothing of.
			ld.forgotten, distrust, scan = false, false, false
			continue
		}
		if errors.Is(err, errReadPast) {
			scan = true // the index ends at the session's last record met
			continue
		}
		if b == nil {
			return fmt.Errorf("store: load %s: %w", sl.id, err)
		}
		b.uncharge() // counted again as the slot's size, if it is kept
		if err == nil && fromKnown && b.expect != 0 && (b.lied || !b.met) {
			// The compaction the session remembered has left the stream:
			// the session's latest compaction is not known any more.
			s.Logger.Warn("the session's latest compaction left the stream; the session loads from its subject's start", "session", sl.id, "from", b.expect)
			s.dropIndex(sl)
			sl.from, sl.fromKnown, sl.saved = 0, false, 0
			distrust, scan = true, true
			continue
		}
		if err == nil && (b.lied || (b.expect != 0 && !b.met)) {
			// The checkpoint names no compaction of the session where it
			// says (tampered, or of another stream): a hint that does not
			// hold. What it read is dropped, and the load reads the
			// session's subject from its start; the checkpoint is
			// replaced.
			s.Logger.Warn("checkpoint's from is not a compaction of the session; the session loads from its subject's start", "session", sl.id, "from", b.expect)
			s.dropIndex(sl)
			distrust, scan = true, true
			saved = 0
			if read != nil {
				wrong = read
			}
			continue
		}
		if (byIndex || len(stored) > 0 || snap != nil) && (errors.Is(err, ErrIndexStale) || errors.Is(err, ErrIndexIncomplete)) {
			// An index that does not hold, or is not proven to list
			// every record: what it read is dropped, and the load reads
			// the session's subject instead. A checkpoint's is replaced.
			s.Logger.Warn("record index does not hold; the session loads from its subject", "session", sl.id, "stored", len(stored) > 0, "err", err)
			s.dropIndex(sl)
			scan = true
			if read != nil && (len(stored) > 0 || snap != nil) {
				wrong = read
			}
			continue
		}
		if err == nil {
			for _, r := range ld.pending {
				if r.seq <= readTo {
					continue // the read found it, unless it was removed
				}
				if err = b.add(r.seq, r.skip, r.v, r.n, r.resets); err != nil {
					break
				}
			}
		}
		// What the read found holds whether it finished or not: the
		// checkpoint, the compactions and the poison records it met.
		from := sl.from
		sl.from, sl.fromKnown, sl.saved = max(sl.from, b.from), true, max(sl.saved, saved)
		// A later compaction than the checkpoint's is written behind, as
		// one the ingest meets: here when the load fails, else below,
		// with the index the load sets.
		later := sl.from > from && sl.from > sl.saved
		if later && err != nil {
			s.checkpoints.put(sl.id, Checkpoint{From: sl.from, Seq: max(sl.seq, b.proj.Seq())})
		}
		s.quarantine(sl, b.found, b.why)
		if errors.Is(err, errPanicked) && attempt < maxLoadAttempts {
			continue // again, without the record now quarantined
		}
		if err != nil {
			return fmt.Errorf("store: load %s: %w", sl.id, err)
		}
		if !byIndex {
			s.setIndex(sl, b.seen)
		}
		if snap != nil {
			sl.snapped, sl.snappedAt = snap.sn.seq, snap.sn.removed
			for _, q := range snap.sn.quarantined {
				if at, ok := slices.BinarySearch(sl.quarantined, q); !ok && q >= sl.from {
					sl.quarantined = slices.Insert(sl.quarantined, at, q)
				}
			}
			s.cache.snapLoads.Add(1)
		}
		// Loaded whole: its rendering needs no room to grow until the
		// ingest brings it more.
		b.proj.Fit()
		sl.proj, sl.size, sl.weight = b.proj, b.proj.Size(), b.weight
		// After a removal, the read met every record of the session up
		// to where it read, the stream's end or past it: one that comes
		// later was removed (a record on its way, or of a restart's
		// backlog below the watermark).
		sl.seq = max(sl.seq, b.proj.Seq())
		if wayEnd != 0 {
			sl.seq = max(sl.seq, readTo)
		}
		if wrong != nil {
			sl.replaces = Checkpoint{}.Replacing(wrong.Key(), past).Replaces()
		}
		switch {
		case later || wrong != nil:
			s.checkpoints.put(sl.id, s.checkpointOf(sl))
		case !byIndex && sl.indexed && (storedTo == 0 || sl.seq > storedTo):
			// Not the index stored: written behind.
			s.markIndex(sl)
		}
		s.cache.add(sl)
		s.cache.loads.Add(1)
		return nil
	}
}

// readStored reads a session's records by a stored index, and the
// records after its last from the subject, up to to: those the ingest
// took in after the checkpoint was written. The two reads run at once,
// the records after the index kept until those of the index are added:
// the second read's round trips cost nothing when the first takes
// longer, as it does. So does the count that proves the index lists
// every record of the session from from, the checkpoint's compaction (or
// the subject's start), on (proveIndex).
func (s *Store) readStored(ctx context.Context, sr SeqLoader, pv Prover, session string, stored []uint64, from, to uint64, b *build) error {
	return s.readStoredWith(ctx, sr, pv, session, stored, max(from, 1), to, b.addData)
}

// readStoredWith is readStored, handing each record to add. The index
// is proven from from on: the session's records from there are those of
// stored and those after its last.
func (s *Store) readStoredWith(ctx context.Context, sr SeqLoader, pv Prover, session string, stored []uint64, from, to uint64, add func(seq uint64, data []byte) error) error {
	type rec struct {
		seq  uint64
		data []byte
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	listed := len(upFrom(stored, from))
	var counted chan count
	if listed > 0 {
		// The count, asked while the records are read.
		counted = make(chan count, 1)
		go func() {
			n, err := pv.CountRecords(ctx, session, from)
			counted <- count{n, err}
		}()
	}
	tail := stored[len(stored)-1] + 1
	var after []rec
	done := make(chan error, 1)
	if tail > to {
		done <- nil
	} else {
		go func() {
			done <- s.Loader.Records(ctx, session, tail, to, func(seq uint64, data []byte) error {
				after = append(after, rec{seq, data}) // the Loader's data is never written again
				return nil
			})
		}()
	}
	err := sr.RecordsAt(ctx, session, stored, add)
	if err != nil {
		cancel()
	}
	if terr := <-done; err == nil {
		err = terr
	}
	if err == nil && counted != nil {
		err = s.proveIndex(ctx, pv, session, from, uint64(listed+len(after)), <-counted)
	}
	if err != nil {
		return err
	}
	for _, r := range after {
		if err := add(r.seq, r.data); err != nil {
			return err
		}
	}
	return nil
}

// count is a Prover's count of a session's records.
type count struct {
	n   uint64
	err error
}

// proveRetries bounds how often proveIndex asks again for a count below
// what the load read: a replica behind answered.
const proveRetries = 4

// proveIndex proves that the stream holds want records of the session
// from from on, those a load by index read (the index's from there, and
// those after its last up to the load's end), given c, a count asked
// while they were read. A count above want is records the index leaves
// out, or records stored after the load's end: either way the index is
// not proven, and the load reads the subject (the session's records
// are then all read, and its checkpoint rewritten). A count below want
// comes from a replica behind (or records removed meanwhile, which the
// store is told of): it asks again, and at last gives up, as for a count
// above. Records are only ever added past the stream's end, so no append
// makes an index that leaves records out look complete.
func (s *Store) proveIndex(ctx context.Context, pv Prover, session string, from, want uint64, c count) error {
	for try := 0; ; try++ {
		switch {
		case c.err != nil:
			if ctx.Err() != nil {
				return c.err
			}
			return fmt.Errorf("count the records of %s from %d: %w: %w", session, from, ErrIndexIncomplete, c.err)
		case c.n == want:
			return nil
		case c.n > want:
			return fmt.Errorf("the stream holds %d records of %s from %d, the index and the records after it %d: %w", c.n, session, from, want, ErrIndexIncomplete)
		case try >= proveRetries:
			return fmt.Errorf("the stream holds %d records of %s from %d, fewer than the %d read: %w", c.n, session, from, want, ErrIndexIncomplete)
		}
		t := time.NewTimer(time.Duration(1<<try) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		c.n, c.err = pv.CountRecords(ctx, session, from)
	}
}

// readAfterSnapshot starts a load from a snapshot: its projection, and
// the records after it, read as readStored reads them: the checkpoint's
// sequences past the snapshot's last record (stored), then the subject up
// to to. The snapshot's last record is read first, and not applied: a
// record of another subject there fails the read with ErrIndexStale, and
// the load reads the subject instead.
func (s *Store) readAfterSnapshot(ctx context.Context, sr SeqLoader, pv Prover, session string, snap *restored, stored []uint64, to uint64, known []uint64, out **build) error {
	sn := snap.sn
	b := s.newBuild(session, sn.from, known)
	b.proj, b.weight, b.size = snap.proj, sn.weight, snap.proj.Size()
	b.seen = slices.Clone(sn.seqs)
	b.charge()
	*out = b
	after := upFrom(stored, sn.seq+1)
	seqs := append([]uint64{sn.seq}, after...)
	return s.readStoredWith(ctx, sr, pv, session, seqs, sn.seq+1, to, func(seq uint64, data []byte) error {
		if seq == sn.seq {
			return nil // in the snapshot: read only to prove it is the session's
		}
		return b.addData(seq, data)
	})
}

// upFrom returns the suffix of increasing seqs from from on.
func upFrom(seqs []uint64, from uint64) []uint64 {
	n, _ := slices.BinarySearch(seqs, from)
	return seqs[n:]
}

// upTo returns the prefix of increasing seqs up to to.
func upTo(seqs []uint64, to uint64) []uint64 {
	n, _ := slices.BinarySearch(seqs, to+1)
	return seqs[:n]
}

// build is a projection being loaded, and what its load found.
type build struct {
	s       *Store
	session string
	proj    *projection.Session
	size    int64
	weight  int64
	from    uint64        // the latest compaction met, or where the read started
	seen    []uint64      // the records from the latest compaction on
	known   []uint64      // failed before the load, in order: skipped, not reported
	found   []quarantined // quarantined by this load
	why     []Rejection   // why, for each of found
	// expect is a checkpoint's From the read starts at, which must be a
	// valid compaction of the session: the first record the read meets
	// is at expect and resets; else lied is set.
	expect uint64
	met    bool
	lied   bool
	// charged is the part of size counted in the cache's bytes while the
	// load reads, so that what loads hold counts against MaxBytes and
	// evicts others; charging stops at uncharge.
	charged  int64
	charging bool
}

func (s *Store) newBuild(session string, from uint64, known []uint64) *build {
	return &build{s: s, session: session, proj: projection.New(s.Options), from: from, known: known, charging: s.Loader != nil}
}

// charge counts the build's size in the cache's bytes, evicting loaded
// sessions past MaxBytes: a load holds what it read before the cache
// does.
func (b *build) charge() {
	if !b.charging || b.size == b.charged {
		return
	}
	b.s.cache.grow(b.size - b.charged)
	b.charged = b.size
	b.s.evict()
}

// uncharge takes the build's size out of the cache's bytes and stops
// charging it.
func (b *build) uncharge() {
	b.s.cache.grow(-b.charged)
	b.charged, b.charging = 0, false
}

// isQuarantined reports whether the record seq failed before the load.
// A record this load quarantines is not met again: the load adds each
// record once, in order.
func (b *build) isQuarantined(seq uint64) bool {
	_, ok := slices.BinarySearch(b.known, seq)
	return ok
}

// addData decodes and adds one record of the stream.
func (b *build) addData(seq uint64, data []byte) error {
	v, err := b.s.Decoder.Decode(data)
	if err != nil {
		return b.add(seq, true, nil, 0, false) // reported when the ingest met it
	}
	return b.add(seq, false, v, len(data), b.s.resets(v, len(data)))
}

// add applies one record, or quarantines it. An error wrapping
// errPanicked means the projection may be half-changed. The projection
// was never rendered: a failure here is the record's own, as it would be
// on any projection built from the same records.
func (b *build) add(seq uint64, skip bool, v any, n int, resets bool) error {
	s := b.s
	if b.expect != 0 && !b.met {
		b.met = true
		b.lied = seq != b.expect || skip || !resets
	}
	if skip {
		b.seen = append(b.seen, seq)
		b.proj.Skip(seq)
		return nil
	}
	if resets {
		b.seen = b.seen[:0]
		b.from = max(b.from, seq)
	}
	b.seen = append(b.seen, seq)
	if b.isQuarantined(seq) {
		// A compaction quarantined here is where the read started: a
		// load starts from the latest compaction it knows.
		b.proj.Skip(seq)
		return nil
	}
	w, err := s.limits().Weigh(b.weight, n, resets)
	if err != nil {
		b.proj.Skip(seq)
		b.quarantine(quarantined{seq: seq}, n, err)
		return nil
	}
	if err := s.applyRecord(b.proj, seq, decoded{v: v}); err != nil {
		b.quarantine(quarantined{seq: seq, panicked: true}, n, err)
		return err
	}
	b.weight = w
	b.size = b.proj.Size()
	b.charge()
	return nil
}

func (b *build) quarantine(q quarantined, n int, err error) {
	b.found = append(b.found, q)
	b.why = append(b.why, Rejection{Subject: b.s.subjectOf(b.session, q.seq), Session: b.session, Seq: q.seq, Size: n, Reason: err.Error()})
}
