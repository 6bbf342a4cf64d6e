// Package checkpoint is the checkpoint of a session: where its
// projection can be rebuilt from, and the bytes it is stored as. It is a
// leaf that both package store (which makes and loads them) and package
// bus (which keeps them in their key-value bucket) use: bus holds no
// other domain type.
package checkpoint

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unsafe"
)

// ErrIndexStale is wrapped by the error of a read by a checkpoint's
// record index that names a sequence holding no record of the session.
var ErrIndexStale = errors.New("store: the record index names a sequence that holds no record of the session")

// Checkpoint says where a session's projection can be rebuilt from: the
// stream sequence of its latest valid compaction (0 when none is known:
// read the subject from its start) and of its last record. A projection
// is a function of the records from its latest valid compaction on, so
// any checkpoint, however old, rebuilds the same projection; a recent one
// rebuilds it from fewer records.
//
// Index, when not empty, lists the session's record sequences from From
// to Seq, in order (From first when it is not 0, Seq last), encoded (see
// WithSeqs and Seqs): a load reads exactly those records by sequence, and
// the records after Seq from the session's subject, instead of scanning
// the subject from From. It is a hint too: a load checks it and scans
// when it does not hold (see store's load.go). A checkpoint without it is the
// format written before it existed, and loads as before.
type Checkpoint struct {
	From  uint64
	Seq   uint64
	Index string
	// Stream names the stream the sequences are of (bus.Checkpoints
	// sets and checks it): a stream deleted and created again numbers
	// other records with the same sequences.
	Stream string

	indexErr string // why the stored index was dropped (IndexError)
	// replaces is the key of a stored checkpoint found wrong (its index
	// leaves records out or names others', or its Seq lies past the
	// stream's end): Newer replaces that one, though it looks as new.
	replaces string
}

// MaxSeqs bounds the record sequences a checkpoint carries: a
// session with more records since its latest compaction is checkpointed
// without them, and loads by scanning its subject from the compaction.
// With the sequences delta- and varint-encoded that is at most 80 KiB of
// base64 for a session interleaved with a million others, 11 KiB when
// with a thousand.
const MaxSeqs = 8192

// ErrBadCheckpoint is wrapped by the error of a stored checkpoint that
// does not decode: a load then scans the session's subject from its
// start, as for a session without one.
var ErrBadCheckpoint = errors.New("checkpoint does not decode")

// checkpointJSON is a checkpoint as stored. Index is absent in the format
// written before it existed.
type checkpointJSON struct {
	From   uint64 `json:"from"`
	Seq    uint64 `json:"seq"`
	Index  []byte `json:"index,omitempty"` // base64 in JSON; see EncodeSeqs
	Stream string `json:"stream,omitempty"`
}

// WithSeqs returns the checkpoint with seqs as its index, or without an
// index when seqs cannot be its (see CheckSeqs): more than
// MaxSeqs of them, not increasing, or not from From to Seq.
func (cp Checkpoint) WithSeqs(seqs []uint64) Checkpoint {
	cp.Index, cp.indexErr = "", ""
	if CheckSeqs(cp.From, cp.Seq, seqs) == nil {
		cp.Index = string(EncodeSeqs(seqs))
	}
	return cp
}

// Seqs decodes the checkpoint's index; nil without one.
func (cp Checkpoint) Seqs() ([]uint64, error) {
	if cp.Index == "" {
		return nil, nil
	}
	seqs, err := DecodeSeqs([]byte(cp.Index))
	if err == nil {
		err = CheckSeqs(cp.From, cp.Seq, seqs)
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
	case cp.Key() == old.Key():
		return false // nothing to change
	case cp.replaces != "" && cp.replaces == pastEnd+old.Key():
		return true // no writer reaches old's Seq: any checkpoint is better
	case cp.replaces != "" && cp.replaces == old.Key() && cp.Seq >= old.Seq:
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

// Replacing returns the checkpoint marked as the replacement of a stored
// one a load found wrong, wrong being that one's Key; past says wrong
// lies past the stream's end (see Newer).
func (cp Checkpoint) Replacing(wrong string, past bool) Checkpoint {
	cp.replaces = wrong
	if past && wrong != "" {
		cp.replaces = pastEnd + wrong
	}
	return cp
}

// Replaces returns what Replacing marked: "" when the checkpoint
// replaces no stored one it found wrong.
func (cp Checkpoint) Replaces() string { return cp.replaces }

// Key names a checkpoint by what it stores of the session.
func (cp Checkpoint) Key() string {
	return fmt.Sprintf("%d %d %s", cp.From, cp.Seq, cp.Index)
}

// EncodeSeqs encodes increasing sequences as uvarints: their count, the
// first, then each one's distance from the one before.
func EncodeSeqs(seqs []uint64) []byte {
	buf := make([]byte, 0, 2+3*len(seqs))
	buf = binary.AppendUvarint(buf, uint64(len(seqs)))
	var prev uint64
	for _, s := range seqs {
		buf = binary.AppendUvarint(buf, s-prev)
		prev = s
	}
	return buf
}

// DecodeSeqs decodes what EncodeSeqs encodes, refusing anything else:
// a count past MaxSeqs, a sequence not above the one before
// (or 0), a value that overflows, bytes left over.
func DecodeSeqs(b []byte) ([]uint64, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errors.New("index: no count")
	}
	if n == 0 || n > MaxSeqs {
		return nil, fmt.Errorf("index: %d sequences, want 1 to %d", n, MaxSeqs)
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

// CheckSeqs reports whether seqs can be a checkpoint's: 1 to
// MaxSeqs increasing sequences, the first From (the compaction)
// when From is not 0, the last Seq.
func CheckSeqs(from, seq uint64, seqs []uint64) error {
	switch {
	case len(seqs) == 0 || len(seqs) > MaxSeqs:
		return fmt.Errorf("index: %d sequences, want 1 to %d", len(seqs), MaxSeqs)
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
