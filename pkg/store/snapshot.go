package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"iter"
	"slices"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// A snapshot is a session's projection at one of its records, stored
// beside its checkpoint, so that the first load of the session after a
// restart (or on an instance that never met it) reads none of its records
// up to that one: one value read instead of a record each, from wherever
// in the stream they are. The stream interleaves every session's records,
// so reading a session's records makes the server load every message
// block of the stream; reading its snapshot, the one block that holds it,
// and the block of the session's last record, read to prove the snapshot
// is of this stream (docs/PERFORMANCE.md, "A snapshot of the projection").
//
// A snapshot is a hint, like a checkpoint. A load uses one only when all
// of these hold, and otherwise loads as if there were none:
//
//   - it decodes (its checksum holds, projection.Restore takes it) and was
//     written under the same limits and projection options;
//   - it names the stream by the same identity (its name and creation
//     time), and the stream's count of sequences that hold no message
//     (bus.Removed) is the one it was written at: no record has left the
//     stream since, so every record it holds is still there. The writer
//     records the count at which every removal was applied to what it
//     snapshots (App writes none where it cannot say so);
//   - it does not start before the checkpoint's compaction and ends at or
//     past it, and ends at or before the records the load reads to;
//   - its last record is a record of the session's subject.
//
// The records after its last are read as a load by index reads them: the
// checkpoint's sequences past it, then the subject from there, the count
// of the session's records past the snapshot proving the sequences list
// them all (Prover).
//
// A snapshot is written only of a session whose record index the store
// holds (snapshotOf): the ingest met its every record since the
// compaction, or a load read them and proved it read them all (a scan of
// the subject, or a checkpoint's index counted against the stream). A
// projection built from an index that leaves records out is never shown,
// and so never written, where a later load would take it for the truth.
//
// The records quarantined before the snapshot's last (too large for the
// session, or failing to apply) stay skipped, but a load from a snapshot
// does not list them in Rejected again, as a load that reads them does:
// the list is of the records this store met.

// SnapshotLoader is a Loader that also stores and reads snapshots.
type SnapshotLoader interface {
	// Snapshot returns the session's stored snapshot; ok is false when
	// there is none.
	Snapshot(ctx context.Context, session string) (data []byte, ok bool, err error)
	// SaveSnapshots stores snapshots; tooLarge counts those too large to
	// store. A reader's loader stores none.
	SaveSnapshots(ctx context.Context, snaps iter.Seq2[string, []byte]) (written, tooLarge int, err error)
	// StreamState returns the stream's identity and how many of its
	// sequences up to its last hold no message now.
	StreamState(ctx context.Context) (identity string, removed uint64, err error)
}

// ErrBadSnapshot is wrapped by the error of a stored snapshot that does
// not decode.
var ErrBadSnapshot = errors.New("snapshot does not decode")

// snapshotMagic starts every stored snapshot, then its format's version.
const (
	snapshotMagic   = "ctxdSNAP"
	snapshotVersion = 1
)

// snapshot is a stored snapshot, decoded but for its projection.
type snapshot struct {
	config      string   // the store's limits and decoder, as configFingerprint
	stream      string   // the stream's identity
	removed     uint64   // the stream's removed count it was written at
	from, seq   uint64   // the session's latest compaction and last record
	weight      int64    // the slot's weight and size at seq
	size        int64    // written, not read: a load counts the restored projection's Size
	seqs        []uint64 // the session's records from from to seq
	quarantined []uint64 // records since from that failed to apply
	proj        []byte   // projection.Session.AppendSnapshot
}

// configFingerprint names what, besides the records, decides a
// projection: the limits (which quarantine records) and the decoder's
// (which skip them). The projection's options are the projection
// snapshot's own business.
func (s *Store) configFingerprint() string {
	l := s.limits()
	return fmt.Sprintf("rec=%d sess=%d depth=%d", l.MaxRecordBytes, l.MaxSessionBytes, s.Decoder.MaxDepth)
}

func appendString(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
}

// encodeSnapshot appends sn's encoding: magic, version, then uvarints and
// length-prefixed strings, the projection, and a CRC-32C of all before it.
func encodeSnapshot(buf []byte, sn *snapshot, proj *projection.Session) []byte {
	start := len(buf)
	buf = append(buf, snapshotMagic...)
	buf = append(buf, snapshotVersion)
	buf = appendString(buf, sn.config)
	buf = appendString(buf, sn.stream)
	buf = binary.AppendUvarint(buf, sn.removed)
	buf = binary.AppendUvarint(buf, sn.from)
	buf = binary.AppendUvarint(buf, sn.seq)
	buf = binary.AppendUvarint(buf, uint64(sn.weight))
	buf = binary.AppendUvarint(buf, uint64(sn.size))
	buf = appendString(buf, string(encodeSeqs(sn.seqs)))
	buf = binary.AppendUvarint(buf, uint64(len(sn.quarantined)))
	for _, q := range sn.quarantined {
		buf = binary.AppendUvarint(buf, q)
	}
	n := len(buf)
	buf = binary.AppendUvarint(buf, 0) // the projection's length, set below
	lenAt := len(buf)
	buf = proj.AppendSnapshot(buf)
	plen := len(buf) - lenAt
	// Rewrite the length prefix now that it is known.
	head := binary.AppendUvarint(nil, uint64(plen))
	buf = slices.Replace(buf, n, lenAt, head...)
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf[start:], crcTable))
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// decodeSnapshot decodes a stored snapshot but for its projection.
func decodeSnapshot(data []byte) (*snapshot, error) {
	if len(data) < len(snapshotMagic)+1+4 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: not a snapshot", ErrBadSnapshot)
	}
	if v := data[len(snapshotMagic)]; v != snapshotVersion {
		return nil, fmt.Errorf("%w: format version %d, want %d", ErrBadSnapshot, v, snapshotVersion)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%w: checksum", ErrBadSnapshot)
	}
	sn, idx, err := readSnapshot(record.NewBinaryReader(body[len(snapshotMagic)+1:]))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	if sn.seq == 0 || sn.from > sn.seq || sn.weight < 0 || sn.size < 0 {
		return nil, fmt.Errorf("%w: from %d, seq %d, weight %d, size %d", ErrBadSnapshot, sn.from, sn.seq, sn.weight, sn.size)
	}
	seqs, err := decodeSeqs(idx)
	if err == nil {
		err = checkSeqs(sn.from, sn.seq, seqs)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	sn.seqs = seqs
	return sn, nil
}

// readSnapshot reads the fields encodeSnapshot wrote after the magic
// and version, failing on the first thing that is not one; idx is the
// encoded index of the session's records.
func readSnapshot(r *record.BinaryReader) (sn *snapshot, idx []byte, err error) {
	sn = &snapshot{}
	str := func(what string) (string, error) {
		b, err := r.Bytes(what)
		return string(b), err
	}
	if sn.config, err = str("config"); err != nil {
		return nil, nil, err
	}
	if sn.stream, err = str("stream"); err != nil {
		return nil, nil, err
	}
	for _, f := range []struct {
		what string
		to   *uint64
	}{{"removed", &sn.removed}, {"from", &sn.from}, {"seq", &sn.seq}} {
		if *f.to, err = r.Uvarint(f.what); err != nil {
			return nil, nil, err
		}
	}
	weight, err := r.Uvarint("weight")
	if err != nil {
		return nil, nil, err
	}
	size, err := r.Uvarint("size")
	if err != nil {
		return nil, nil, err
	}
	sn.weight, sn.size = int64(weight), int64(size)
	if idx, err = r.Bytes("index"); err != nil {
		return nil, nil, err
	}
	nq, err := r.Count("quarantined count", 1)
	if err != nil {
		return nil, nil, err
	}
	for range nq {
		q, err := r.Uvarint("quarantined record")
		if err != nil {
			return nil, nil, err
		}
		if q < sn.from || q > sn.seq || len(sn.quarantined) > 0 && q <= sn.quarantined[len(sn.quarantined)-1] {
			return nil, nil, fmt.Errorf("quarantined record %d out of order or outside %d..%d", q, sn.from, sn.seq)
		}
		sn.quarantined = append(sn.quarantined, q)
	}
	if sn.proj, err = r.Bytes("projection"); err != nil {
		return nil, nil, err
	}
	if r.Left() != 0 {
		return nil, nil, fmt.Errorf("%d bytes after the projection", r.Left())
	}
	return sn, idx, nil
}

// snapshotOf returns a loaded slot's snapshot, or nil when it has none to
// write: not loaded, not indexed (a session whose records the store does
// not list), caught up by a load in progress, or written already at its
// last record at the stream's removed count. The slot is locked.
func (s *Store) snapshotOf(sl *slot, stream string, removed uint64) []byte {
	sn := s.snapshotMeta(sl, stream, removed)
	if sn == nil {
		return nil
	}
	return encodeSnapshot(nil, sn, sl.proj)
}

// snapshotMeta returns what a loaded slot's snapshot says besides its
// projection, its lists copied, or nil as snapshotOf. The slot is locked.
func (s *Store) snapshotMeta(sl *slot, stream string, removed uint64) *snapshot {
	if sl.dead || sl.proj == nil || sl.loading != nil || !sl.fromKnown || !sl.indexed ||
		len(sl.seqs) == 0 || len(sl.seqs) > MaxCheckpointSeqs || sl.proj.Seq() != sl.seq || sl.snapped == sl.seq && sl.snappedAt == removed {
		return nil
	}
	if checkSeqs(sl.from, sl.seq, sl.seqs) != nil {
		return nil
	}
	return &snapshot{config: s.configFingerprint(), stream: stream, removed: removed,
		from: sl.from, seq: sl.seq, weight: sl.weight, size: sl.size, seqs: slices.Clone(sl.seqs), quarantined: slices.Clone(sl.quarantined)}
}

// CloseSnapshots writes the snapshot of every loaded session whose
// snapshot is not written at its last record, until ctx ends: what a
// store does at shutdown, after the ingest has stopped. stream is the
// stream's identity, and removed its count of sequences holding no
// message at which every removal has been applied to the store (see
// SnapshotLoader). It returns how many it wrote, and how many it did not
// (too large for the bucket, or not reached): those sessions load by
// their checkpoint, reading more of the stream.
func (s *Store) CloseSnapshots(ctx context.Context, stream string, removed uint64) (written, left int, err error) {
	return s.writeSnapshots(ctx, removed, func(sl *slot) []byte { return s.snapshotOf(sl, stream, removed) })
}

// WriteIdleSnapshots writes the snapshots of the loaded sessions that had
// no record since the call before, and whose snapshot is not written at
// their last record, up to about budget bytes; the rest are written by
// later calls. Called every so often behind the ingest, it keeps the
// snapshots of sessions that pause close to their last record, for a
// restart that is not a clean stop: a session snapshotted and then
// changed loads from its snapshot and the records after it. stream and
// removed are as for CloseSnapshots.
func (s *Store) WriteIdleSnapshots(ctx context.Context, stream string, removed uint64, budget int) (written int, err error) {
	spent := 0
	written, _, err = s.writeSnapshots(ctx, removed, func(sl *slot) []byte {
		var data []byte
		if sl.seq == sl.idleSeq && spent < budget {
			data = s.snapshotOf(sl, stream, removed)
			spent += len(data)
		}
		sl.idleSeq = sl.seq
		return data
	})
	return written, err
}

// writeSnapshots writes the snapshot pick returns of each slot (nil: none),
// pick being called with the slot locked, and returns how many were
// written and how many not. A slot is marked written at its last record
// as its snapshot is handed on; when the write fails, those handed on are
// marked unwritten again, so that a later call writes them (some may be
// written already: again costs a write, nothing else).
func (s *Store) writeSnapshots(ctx context.Context, removed uint64, pick func(sl *slot) []byte) (written, left int, err error) {
	sv, ok := s.Loader.(SnapshotLoader)
	if !ok {
		return 0, 0, nil
	}
	type handed struct {
		sl  *slot
		seq uint64
	}
	var out []handed
	snaps := func(yield func(string, []byte) bool) {
		for _, sl := range s.dir.all() {
			sl.mu.Lock()
			data := pick(sl)
			if data != nil {
				sl.snapped, sl.snappedAt = sl.seq, removed
				out = append(out, handed{sl, sl.seq})
			}
			id := sl.id
			sl.mu.Unlock()
			if data != nil && !yield(id, data) {
				return
			}
		}
	}
	written, _, err = sv.SaveSnapshots(ctx, snaps)
	if err != nil {
		for _, h := range out {
			h.sl.mu.Lock()
			if h.sl.snapped == h.seq && h.sl.snappedAt == removed {
				h.sl.snapped = 0
			}
			h.sl.mu.Unlock()
		}
	}
	return written, len(out) - written, err
}

// restored is what a load takes from a snapshot it uses.
type restored struct {
	sn   *snapshot
	proj *projection.Session
}

// fetched is a session's stored snapshot and the stream's state, read
// together beside the load's read of its checkpoint.
type fetched struct {
	data     []byte
	found    bool
	err      error
	stream   string
	removed  uint64
	stateErr error
}

// fetchSnapshot reads a session's snapshot and the stream's state at
// once; the result comes on the channel.
func fetchSnapshot(ctx context.Context, sv SnapshotLoader, session string) <-chan fetched {
	out := make(chan fetched, 1)
	go func() {
		var f fetched
		state := make(chan struct{})
		go func() {
			defer close(state)
			f.stream, f.removed, f.stateErr = sv.StreamState(ctx)
		}()
		f.data, f.found, f.err = sv.Snapshot(ctx, session)
		<-state
		out <- f
	}()
	return out
}

// useSnapshot returns the session's snapshot f when a load from the
// checkpoint cp (ok: there is one) up to to may start from it; nil
// otherwise, saying why in a warning where the snapshot is not merely
// older than what the load needs.
func (s *Store) useSnapshot(ctx context.Context, f fetched, session string, cp Checkpoint, ok bool, to uint64) *restored {
	if f.err != nil || !f.found {
		if f.err != nil && ctx.Err() == nil {
			s.Logger.Warn("snapshot not read; the session loads by its checkpoint", "session", session, "err", f.err)
		}
		return nil
	}
	sn, err := decodeSnapshot(f.data)
	if err != nil {
		s.Logger.Warn("snapshot dropped; the session loads by its checkpoint", "session", session, "err", err)
		return nil
	}
	switch {
	case sn.config != s.configFingerprint():
		return nil // written under other limits
	case ok && (sn.from < cp.From || sn.seq < cp.From):
		return nil // older than the checkpoint's compaction
	case sn.seq > to:
		return nil // ahead of what the load reads
	}
	if f.stateErr != nil {
		if ctx.Err() == nil {
			s.Logger.Warn("snapshot not used: the stream's state could not be read", "session", session, "err", f.stateErr)
		}
		return nil
	}
	if sn.stream != f.stream || sn.removed != f.removed {
		return nil // another stream, or records removed since
	}
	proj, err := projection.Restore(s.Options, sn.proj)
	if err != nil {
		s.Logger.Warn("snapshot dropped; the session loads by its checkpoint", "session", session, "err", err)
		return nil
	}
	if proj.Seq() != sn.seq {
		s.Logger.Warn("snapshot dropped; the session loads by its checkpoint", "session", session,
			"err", fmt.Errorf("%w: projection at %d, snapshot at %d", ErrBadSnapshot, proj.Seq(), sn.seq))
		return nil
	}
	return &restored{sn: sn, proj: proj}
}
