package store

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// Apply decodes the record at stream sequence seq and applies it to its
// session. A record that does not decode is skipped and reported: the
// session's sequence still moves past it. Apply is idempotent by sequence.
// A session that is not loaded only notes the sequences it needs; one
// being loaded keeps the record for its load, which applies it before it
// shows the projection: Apply never waits for a load.
//
// A record past the watermark is new: the ingest meets those in stream
// order, every one of them. One at or below it comes from the backlog
// of a restart (the watermark starts at the stream's end) or is
// delivered again: records of its session after it may be met later, or
// never, so it starts no index and ends the one its session has. It may
// be one its session has seen: that is found before it is decoded.
func (s *Store) Apply(session string, seq uint64, data []byte) {
	inOrder := seq > s.watermark.get()
	defer s.watermark.advance(seq)
	if seq > s.delivered.Load() {
		s.delivered.Store(seq) // one goroutine applies to a store
	}
	if !inOrder && s.seen(session, seq) {
		s.stats.duplicates.Add(1)
		return // a redelivery or a replay
	}
	rec, err := s.decode(data)
	defer s.done(rec)
	sl := s.lockSlot(session)
	if s.way.dropped(seq) {
		// Deleted from the stream before it came (removed.go): looked
		// at under the slot's lock, so that ForgetHolding, which notes
		// it before it looks at the slots, either finds the record
		// applied, or has it skipped here.
		sl.mu.Unlock()
		return
	}
	if seq <= sl.seq {
		sl.mu.Unlock()
		if inOrder && err != nil {
			// Read first by a load past the watermark (removed.go): the
			// ingest meets it now, and reports it.
			s.reject(Rejection{Subject: s.subjectOf(session, seq), Session: session, Seq: seq, Size: len(data), Reason: err.Error(), Kind: decodeKind(err)})
			return
		}
		s.stats.duplicates.Add(1)
		return // seen before: a redelivery, a replay, or read by a load
	}
	sl.seq = seq
	sl.recent = true
	if !inOrder {
		s.dropIndex(sl) // loads of this session scan its subject
	}
	if err != nil {
		s.index(sl, seq) // a load skips it again
		if sl.indexed {
			s.markIndex(sl)
		}
		if sl.proj != nil {
			sl.proj.Skip(seq)
		} else if ld := sl.loading; ld != nil && seq > ld.to {
			ld.pending = append(ld.pending, noted{seq: seq, skip: true})
		}
		sl.mu.Unlock()
		s.reject(Rejection{Subject: s.subjectOf(session, seq), Session: session, Seq: seq, Size: len(data), Reason: err.Error(), Kind: decodeKind(err)})
		return
	}
	n := len(data)
	resets := rec.skel == nil && s.resets(rec.v, n)
	if resets {
		sl.from = seq
		sl.fromKnown = true
		if inOrder {
			s.setIndex(sl, []uint64{seq})
		}
		sl.quarantined = sl.quarantined[:0] // never read again
	} else {
		s.index(sl, seq)
	}
	var poison error
	switch ld := sl.loading; {
	case sl.proj != nil:
		poison = s.applyLoaded(sl, seq, rec, n, resets)
	case ld != nil && seq > ld.to:
		// Past what the load reads: it applies this before it is done.
		ld.pending = append(ld.pending, noted{seq: seq, v: rec.whole(s.Decoder, data), n: n, resets: resets})
		s.stats.records.Add(1)
	default:
		// Not loaded: a poison record is found when the session loads.
		s.stats.records.Add(1)
	}
	if sl.indexed && !resets {
		s.markIndex(sl)
	}
	var cp Checkpoint
	if resets {
		cp = s.checkpointOf(sl) // its index, if any, is the compaction alone
	}
	sl.mu.Unlock()
	if poison != nil {
		s.reject(Rejection{Subject: s.subjectOf(session, seq), Session: session, Seq: seq, Size: n, Reason: poison.Error(), Kind: KindQuarantined})
	}
	if resets && s.Loader != nil {
		// Written behind the ingest: until it is, a load starts from an
		// earlier checkpoint and reads more records.
		s.checkpoints.put(session, cp)
	}
	s.evict()
	s.forget(false)
}

// decoded is a record as Apply decodes it: whole (v), with its JSON
// when that is canonical (raw); or, for a message that the passes keep
// as it is, only what they read of it (skel, see projection.Shape) and
// its JSON. skel is built in the memory of reader, and valid until the
// reader goes back to the store (done).
type decoded struct {
	v      any
	skel   *record.Map
	raw    []byte
	reader *shapeReader
}

// shapeReader is a record.ShapeReader for the decoder it was made with.
type shapeReader struct {
	d record.Decoder
	r *record.ShapeReader
}

// done gives the reader of a record back once it is applied, holding
// nothing of the record.
func (s *Store) done(rec decoded) {
	if rec.reader != nil {
		rec.reader.r.Clear()
		s.shapes.Put(rec.reader)
	}
}

// decode decodes a record for Apply. With ShareInput, the record's bytes
// never change, and may stand for its message: a message that passes
// through as it is is decoded to projection.Shape alone, and held as its
// JSON until its session needs it decoded; any other record written as
// AppendJSON writes it is decoded whole and keeps its JSON, which its
// session copies into its rendering rather than encoding it again.
func (s *Store) decode(data []byte) (decoded, error) {
	if s.Decoder.ShareInput {
		rd, _ := s.shapes.Get().(*shapeReader)
		if rd == nil || rd.d != s.Decoder {
			rd = &shapeReader{d: s.Decoder, r: s.Decoder.ShapeReader(projection.Shape)}
		}
		if skel, ok := rd.r.Decode(data); ok && projection.PassesThrough(skel) {
			return decoded{skel: skel, raw: data, reader: rd}, nil
		}
		rd.r.Clear()
		s.shapes.Put(rd)
	}
	v, canonical, err := s.Decoder.DecodeCanonical(data)
	if err != nil {
		return decoded{}, err
	}
	rec := decoded{v: v}
	if canonical && s.Decoder.ShareInput {
		rec.raw = data
	}
	return rec, nil
}

// whole returns the record decoded whole.
func (r decoded) whole(d record.Decoder, data []byte) any {
	if r.skel == nil {
		return r.v
	}
	m, err := d.Decode(data)
	if err != nil {
		// DecodeShape found it canonical: it decodes.
		panic(fmt.Sprintf("store: a record DecodeShape took does not decode: %v", err))
	}
	return m
}

// seen reports whether the session's slot has seen the record seq.
func (s *Store) seen(session string, seq uint64) bool {
	sl := s.dir.get(session)
	if sl == nil {
		return false
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return !sl.dead && seq <= sl.seq
}

// applyLoaded applies a decoded record to a loaded session, or
// quarantines it when it would take the session past its bound; it
// returns the reason a record is quarantined. rec is the record as
// decode gave it: whole, or held as its JSON (see decoded). The slot is
// locked.
func (s *Store) applyLoaded(sl *slot, seq uint64, rec decoded, n int, resets bool) error {
	w, err := s.limits().Weigh(sl.weight, n, resets)
	if err != nil {
		sl.proj.Skip(seq)
		s.cache.touch(sl)
		return err
	}
	if err := s.applyRecord(sl.proj, seq, rec); err != nil {
		// The projection may be half-changed: drop it. The failure may
		// come from what the projection held (an earlier entry rendered
		// again) rather than from this record: the next load applies
		// the record to a projection fresh from the stream, and
		// quarantines it only if it fails there too.
		s.cache.drop(sl)
		s.Logger.Warn("projection failed; it loads again from the stream", "session", sl.id, "seq", seq, "err", err)
		return nil
	}
	sl.weight = w
	s.resize(sl)
	s.cache.touch(sl)
	s.stats.records.Add(1)
	return nil
}

func (s *Store) limits() Limits {
	return Limits{MaxRecordBytes: s.Decoder.MaxBytes, MaxSessionBytes: s.MaxSessionBytes}
}

// resets is Limits.Resets with the store's limits.
func (s *Store) resets(v any, n int) bool { return s.limits().Resets(v, n) }

// applyRecord applies a decoded record to a projection: a message held
// as its JSON by Session.ApplyShaped, any other by Session.ApplyJSON. A
// panic comes back as an error wrapping errPanicked: the projection may
// then be half-changed and must be dropped.
func (s *Store) applyRecord(p *projection.Session, seq uint64, rec decoded) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %w: %v", ErrQuarantined, errPanicked, r)
		}
	}()
	switch {
	case s.applyHook != nil:
		s.applyHook(p, seq, rec.whole(s.Decoder, rec.raw))
	case rec.skel != nil:
		p.ApplyShaped(seq, rec.skel, rec.raw)
	default:
		p.ApplyJSON(seq, rec.v, rec.raw)
	}
	return nil
}

// Reject reports a record that belongs to no session (a subject that is
// not a valid session id) and moves the watermark past it.
func (s *Store) Reject(r Rejection) {
	s.reject(r)
	s.Advance(r.Seq)
}

func (s *Store) reject(r Rejection) {
	if r.Kind == "" {
		// Records a load finds it cannot apply.
		r.Kind = KindQuarantined
	}
	if s.rejects.add(r, s.RejectLog) {
		s.Logger.Warn("record skipped", "subject", r.Subject, "session", r.Session, "seq", r.Seq, "size", r.Size, "reason", r.Reason)
	}
}

// Rejected lists the most recent rejected records, oldest first.
func (s *Store) Rejected() []Rejection { return s.rejects.list() }

// ShareRejections makes s report its rejected records to other's list and
// counts, so that stores fed from one stream list each record once
// (while it is listed) whichever of them met it. Call it before s is
// used.
func (s *Store) ShareRejections(other *Store) { s.rejects = other.rejects }
