package store

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unsafe"
)

// MaxCheckpointSeqs bounds the record sequences a checkpoint carries: a
// session with more records since its latest compaction is checkpointed
// without them, and loads by scanning its subject from the compaction.
// With the sequences delta- and varint-encoded that is at most 80 KiB of
// base64 for a session interleaved with a million others, 11 KiB when
// with a thousand.
const MaxCheckpointSeqs = 8192

// ErrBadCheckpoint is wrapped by the error of a stored checkpoint that
// does not decode: a load then scans the session's subject from its
// start, as for a session without one.
var ErrBadCheckpoint = errors.New("checkpoint does not decode")

// checkpointJSON is a checkpoint as stored. Index is absent in the format
// written before it existed.
type checkpointJSON struct {
	From   uint64 `json:"from"`
	Seq    uint64 `json:"seq"`
	Index  []byte `json:"index,omitempty"` // base64 in JSON; see encodeSeqs
	Stream string `json:"stream,omitempty"`
}

// WithSeqs returns the checkpoint with seqs as its index, or without an
// index when seqs cannot be its (see checkSeqs): more than
// MaxCheckpointSeqs of them, not increasing, or not from From to Seq.
func (cp Checkpoint) WithSeqs(seqs []uint64) Checkpoint {
	cp.Index, cp.indexErr = "", ""
	if checkSeqs(cp.From, cp.Seq, seqs) == nil {
		cp.Index = string(encodeSeqs(seqs))
	}
	return cp
}

// Seqs decodes the checkpoint's index; nil without one.
func (cp Checkpoint) Seqs() ([]uint64, error) {
	if cp.Index == "" {
		return nil, nil
	}
	seqs, err := decodeSeqs([]byte(cp.Index))
	if err == nil {
		err = checkSeqs(cp.From, cp.Seq, seqs)
	}
	if err != nil {
		return nil, err
	}
	return seqs, nil
}

// MarshalJSON stores a checkpoint as {"from":F,"seq":S,"index":"..."},
// index being base64, absent when the checkpoint has none: the bytes
// encoding/json writes for checkpointJSON. It appends them itself, as
// the index of a long session is kilobytes that json.Marshal would
// encode, then scan again, at every write behind the ingest; called
// through json.Marshal they are scanned once more, so writers call it
// directly.
func (cp Checkpoint) MarshalJSON() ([]byte, error) {
	n := base64.StdEncoding.EncodedLen(len(cp.Index))
	buf := make([]byte, 0, 64+n+len(cp.Stream))
	buf = append(buf, `{"from":`...)
	buf = strconv.AppendUint(buf, cp.From, 10)
	buf = append(buf, `,"seq":`...)
	buf = strconv.AppendUint(buf, cp.Seq, 10)
	if cp.Index != "" {
		buf = append(buf, `,"index":"`...)
		buf = base64.StdEncoding.AppendEncode(buf, bytesOf(cp.Index))
		buf = append(buf, '"')
	}
	if cp.Stream != "" {
		name, err := json.Marshal(cp.Stream) // escaped as encoding/json does
		if err != nil {
			return nil, err
		}
		buf = append(buf, `,"stream":`...)
		buf = append(buf, name...)
	}
	return append(buf, '}'), nil
}

// bytesOf returns the bytes of s without copying them; they must not be
// written.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// UnmarshalJSON reads a checkpoint in either format. A checkpoint whose
// from and seq do not decode is an error; one whose index does not (or
// does not fit its from and seq) decodes without it, and IndexError says
// why.
func (cp *Checkpoint) UnmarshalJSON(data []byte) error {
	var in checkpointJSON
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*cp = Checkpoint{From: in.From, Seq: in.Seq, Index: string(in.Index), Stream: in.Stream}
	if _, err := cp.Seqs(); err != nil {
		cp.Index, cp.indexErr = "", err.Error()
	}
	return nil
}

// IndexError says why a decoded checkpoint's stored index was dropped;
// nil when it was not.
func (cp Checkpoint) IndexError() error {
	if cp.indexErr == "" {
		return nil
	}
	return errors.New(cp.indexErr)
}

// WithoutIndex returns the checkpoint without its index.
func (cp Checkpoint) WithoutIndex() Checkpoint {
	return Checkpoint{From: cp.From, Seq: cp.Seq, Stream: cp.Stream, replaces: cp.replaces}
}

// Newer reports whether cp should replace old, a stored checkpoint of the
// same session: a checkpoint never gives way to an older one, so writers
// that race (the ingest behind, a shutdown, another instance, a rebuild)
// never move a session's checkpoint back. cp is newer when it reaches a
// later record, or the same record with a later compaction, or the same
// with an index where old has none; never when it stores what old does.
// A checkpoint a load wrote after it found old wrong (an index that does
// not list the session's records) replaces old, and only old, when it
// reaches old's record too; one written after old was found past the
// stream's end replaces it whatever their sequences.
func (cp Checkpoint) Newer(old Checkpoint) bool {
	switch {
	case cp.key() == old.key():
		return false // nothing to change
	case cp.replaces != "" && cp.replaces == pastEnd+old.key():
		return true // no writer reaches old's Seq: any checkpoint is better
	case cp.replaces != "" && cp.replaces == old.key() && cp.Seq >= old.Seq:
		// Found wrong by a load that read as far: what it read holds.
		// One that read less (an instance behind the writer of old) may
		// have found old "wrong" only for records it has not read, and
		// never moves the session's checkpoint back.
		return true
	case cp.Seq != old.Seq:
		return cp.Seq > old.Seq
	case cp.From != old.From:
		return cp.From > old.From
	}
	return cp.Index != "" && old.Index == ""
}

// Corrective reports whether the checkpoint replaces a stored one a load
// found wrong (see Newer): an instance that writes no checkpoints of its
// own writes those.
func (cp Checkpoint) Corrective() bool { return cp.replaces != "" }

// pastEnd marks the key of a checkpoint found past the stream's end in
// replaces.
const pastEnd = "past the end: "

// key names a checkpoint by what it stores of the session.
func (cp Checkpoint) key() string {
	return fmt.Sprintf("%d %d %s", cp.From, cp.Seq, cp.Index)
}

// encodeSeqs encodes increasing sequences as uvarints: their count, the
// first, then each one's distance from the one before.
func encodeSeqs(seqs []uint64) []byte {
	buf := make([]byte, 0, 2+3*len(seqs))
	buf = binary.AppendUvarint(buf, uint64(len(seqs)))
	var prev uint64
	for _, s := range seqs {
		buf = binary.AppendUvarint(buf, s-prev)
		prev = s
	}
	return buf
}

// decodeSeqs decodes what encodeSeqs encodes, refusing anything else:
// a count past MaxCheckpointSeqs, a sequence not above the one before
// (or 0), a value that overflows, bytes left over.
func decodeSeqs(b []byte) ([]uint64, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("index: no count")
	}
	if n == 0 || n > MaxCheckpointSeqs {
		return nil, fmt.Errorf("index: %d sequences, want 1 to %d", n, MaxCheckpointSeqs)
	}
	b = b[k:]
	if uint64(len(b)) < n {
		return nil, fmt.Errorf("index: %d bytes for %d sequences", len(b), n)
	}
	seqs := make([]uint64, 0, n)
	var prev uint64
	for i := uint64(0); i < n; i++ {
		d, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("index: sequence %d of %d does not decode", i+1, n)
		}
		b = b[k:]
		if d == 0 || prev+d < prev {
			return nil, fmt.Errorf("index: sequence %d of %d is not above the one before", i+1, n)
		}
		prev += d
		seqs = append(seqs, prev)
	}
	if len(b) > 0 {
		return nil, fmt.Errorf("index: %d bytes after %d sequences", len(b), n)
	}
	return seqs, nil
}

// checkSeqs reports whether seqs can be a checkpoint's: 1 to
// MaxCheckpointSeqs increasing sequences, the first From (the compaction)
// when From is not 0, the last Seq.
func checkSeqs(from, seq uint64, seqs []uint64) error {
	switch {
	case len(seqs) == 0 || len(seqs) > MaxCheckpointSeqs:
		return fmt.Errorf("index: %d sequences, want 1 to %d", len(seqs), MaxCheckpointSeqs)
	case from != 0 && seqs[0] != from:
		return fmt.Errorf("index: starts at %d, not at the compaction %d", seqs[0], from)
	case seqs[0] == 0:
		return errors.New("index: sequence 0")
	case seqs[len(seqs)-1] != seq:
		return fmt.Errorf("index: ends at %d, not at the last record %d", seqs[len(seqs)-1], seq)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			return fmt.Errorf("index: sequence %d (%d) is not above the one before (%d)", i+1, seqs[i], seqs[i-1])
		}
	}
	return nil
}
