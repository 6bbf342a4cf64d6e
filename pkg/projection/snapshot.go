package projection

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"

	"github.com/ctxd/ctxd/pkg/record"
)

// A snapshot is a session's whole state in bytes: what a service stores
// so that the first request for a session after a restart needs none of
// the session's records.
//
// What it holds is the pass-1 messages since the session's latest
// compaction, each with the sequence of its record, and the session's
// sequence; everything else a Session keeps (pairing, the latest
// screenshot, what was dropped) follows from them. Restore replays them
// through the same code Apply runs, so a restored session cannot drift
// from a live one: its indexes are built, not read.
//
// One thing does not follow from the messages. A settled entry is kept
// as its rendering (see pack.go), and the rendering of a trimmed
// screenshot result has lost its images: the snapshot keeps, for each
// such result, how many images it had, which the Dropped report counts.
//
// The format, version 1; integers are unsigned varints unless noted:
//
//	magic "ctxd\x00snp", version byte 1
//	options: count, then each browser tool name (length, bytes), sorted
//	seq: the last sequence applied or skipped
//	entries: count, then for each
//	  sequence: the first absolute, each next one as the difference
//	  form byte: 1 JSON, the entry's rendering from the JSON cache;
//	             2 value, the message in the value encoding below
//	  length (4 bytes, big-endian), then the message's bytes
//	  trimmed results: count, then each (result index, image count)
//	checksum: CRC-32C of everything before it (4 bytes, big-endian)
//
// JSON serves a settled entry as it is: only messages JSON carries
// exactly are packed. Any other message takes the value encoding, which
// keeps each value's Go type (a whole float64 stays one; a Number keeps
// its literal): a tag byte, then
//
//	0 nil, 1 false, 2 true
//	3 string, 7 Number literal: length, bytes
//	4 int64: zigzag varint; 5 uint64: varint
//	6 float64: 8 bytes, big-endian IEEE 754
//	8 array: count, then the elements
//	9 map: count, then each key (length, bytes) and value

// ErrSnapshot is the error Restore wraps when it cannot restore a
// session from the bytes it is given.
var ErrSnapshot = errors.New("invalid snapshot")

const (
	snapshotMagic   = "ctxd\x00snp"
	snapshotVersion = 1

	formJSON  = 1
	formValue = 2

	// snapshotMaxDepth bounds the nesting of a restored message. Records
	// decode with record.DefaultMaxDepth, and a message is part of one.
	snapshotMaxDepth = 4 * record.DefaultMaxDepth
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendSnapshot appends to buf an encoding of the session's whole state:
// Restore gives back a session that answers, and goes on applying records,
// exactly as this one does.
//
// The snapshot holds the session's messages since its latest compaction
// (a settled one as the JSON bytes it is served as) and its sequence, for
// the options the session was made with; it is about the size of the
// session's JSON reply. Taking it changes nothing in the session, renders
// nothing, and costs about a copy of the reply's bytes.
func (s *Session) AppendSnapshot(buf []byte) []byte {
	start := len(buf)
	buf = append(buf, snapshotMagic...)
	buf = append(buf, snapshotVersion)
	buf = appendFingerprint(buf, s.browser)
	buf = binary.AppendUvarint(buf, s.seq)
	buf = binary.AppendUvarint(buf, uint64(len(s.entries)))
	var prev uint64
	for i := range s.entries {
		e := &s.entries[i]
		buf = binary.AppendUvarint(buf, e.seq-prev)
		prev = e.seq
		var n int
		if e.packed || e.lazy {
			b := s.lazyOrPacked(i)
			n = len(b)
			buf = append(buf, formJSON)
			buf = binary.BigEndian.AppendUint32(buf, uint32(n))
			buf = append(buf, b...)
		} else {
			buf = append(buf, formValue)
			at := len(buf)
			buf = append(buf, 0, 0, 0, 0)
			buf = record.AppendBinary(buf, e.msg)
			n = len(buf) - at - 4
			binary.BigEndian.PutUint32(buf[at:], uint32(n))
		}
		if n > math.MaxUint32 {
			// No record is that large (a NATS message is 64 MiB at most);
			// a length cut short would restore another message.
			panic(fmt.Sprintf("projection: snapshot of a %d-byte message from seq %d", n, e.seq))
		}
		trimmed := s.storedTrimmed(i)
		buf = binary.AppendUvarint(buf, uint64(len(trimmed)))
		for _, ri := range trimmed {
			buf = binary.AppendUvarint(buf, uint64(ri))
			buf = binary.AppendUvarint(buf, uint64(e.results[ri].images))
		}
	}
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf[start:], castagnoli))
}

// lazyOrPacked returns the JSON of entry i, lazy or packed: its rendering.
func (s *Session) lazyOrPacked(i int) []byte {
	if s.entries[i].lazy {
		return s.raws[s.rawAt(i)].b
	}
	return s.jsonEntry(i)
}

// storedTrimmed lists the results of entry i whose images the stored
// message has lost: a packed entry is stored as its rendering, and an
// entry unpacked from it keeps the rendering as its message.
func (s *Session) storedTrimmed(i int) []int {
	e := &s.entries[i]
	var trimmed []int
	var actual []result
	for ri, r := range e.results {
		if r.images == 0 {
			continue
		}
		if e.packed || e.lazy {
			if !s.trimmed(i, r) {
				continue
			}
		} else {
			if actual == nil {
				actual = resultsOf(e.msg)
			}
			if actual[ri].images == r.images {
				continue
			}
		}
		trimmed = append(trimmed, ri)
	}
	return trimmed
}

// appendFingerprint appends what of the options changes the projection:
// the browser tool names, sorted.
func appendFingerprint(buf []byte, browser map[string]bool) []byte {
	names := fingerprint(browser)
	buf = binary.AppendUvarint(buf, uint64(len(names)))
	for _, n := range names {
		buf = binary.AppendUvarint(buf, uint64(len(n)))
		buf = append(buf, n...)
	}
	return buf
}

func fingerprint(browser map[string]bool) []string {
	names := make([]string, 0, len(browser))
	for n := range browser {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
