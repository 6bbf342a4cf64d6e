package projection

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"unicode/utf8"

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

// Tags of the value encoding.
const (
	tagNil = iota
	tagFalse
	tagTrue
	tagString
	tagInt
	tagUint
	tagFloat
	tagNumber
	tagArray
	tagMap
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
		if e.packed {
			b := s.jsonEntry(i)
			n = len(b)
			buf = append(buf, formJSON)
			buf = binary.BigEndian.AppendUint32(buf, uint32(n))
			buf = append(buf, b...)
		} else {
			buf = append(buf, formValue)
			at := len(buf)
			buf = append(buf, 0, 0, 0, 0)
			buf = appendValue(buf, e.msg)
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
		if e.packed {
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

// appendValue appends the value encoding of a record value. Sessions hold
// only record values: any other type is a bug, and a snapshot without
// the value would restore a different session.
func appendValue(buf []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(buf, tagNil)
	case bool:
		if x {
			return append(buf, tagTrue)
		}
		return append(buf, tagFalse)
	case string:
		buf = binary.AppendUvarint(append(buf, tagString), uint64(len(x)))
		return append(buf, x...)
	case int64:
		return binary.AppendVarint(append(buf, tagInt), x)
	case uint64:
		return binary.AppendUvarint(append(buf, tagUint), x)
	case float64:
		return binary.BigEndian.AppendUint64(append(buf, tagFloat), math.Float64bits(x))
	case record.Number:
		buf = binary.AppendUvarint(append(buf, tagNumber), uint64(len(x)))
		return append(buf, x...)
	case []any:
		buf = binary.AppendUvarint(append(buf, tagArray), uint64(len(x)))
		for _, e := range x {
			buf = appendValue(buf, e)
		}
		return buf
	case *record.Map:
		if x == nil {
			return append(buf, tagNil)
		}
		buf = binary.AppendUvarint(append(buf, tagMap), uint64(len(x.Members)))
		for _, m := range x.Members {
			buf = binary.AppendUvarint(buf, uint64(len(m.Key)))
			buf = append(buf, m.Key...)
			buf = appendValue(buf, m.Value)
		}
		return buf
	}
	panic(fmt.Sprintf("projection: snapshot of a session holding a %T", v))
}

// Restore decodes what AppendSnapshot encoded, for a session of opt. Errors wrap ErrSnapshot.
//
// The restored session answers every rendering, Seq, Len, Dropped and
// MessageSeqs as the session the snapshot was taken of, and goes on
// applying records as it would; its Version is its own, non-zero, and
// changes with every later change, as any session's does. It renders
// and settles as a session fed the records would.
//
// A snapshot is for one set of options: one taken with other browser
// tools is refused, as it would restore a different projection. So are
// bytes that are not a whole snapshot of this format: a wrong magic or
// version, a checksum that does not match, trailing bytes, a count
// beyond the bytes left, sequences out of order, a message pass 1 could
// not have produced, an image count no message could have had. Restore
// never panics, and allocates in proportion to len(data). The session
// keeps no reference to data, which the caller may reuse.
func Restore(opt Options, data []byte) (*Session, error) {
	head := len(snapshotMagic) + 1
	if len(data) < head+4 {
		return nil, fmt.Errorf("%w: %d bytes, shorter than any snapshot", ErrSnapshot, len(data))
	}
	if string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: no snapshot magic: starts %q", ErrSnapshot, data[:len(snapshotMagic)])
	}
	if v := data[len(snapshotMagic)]; v != snapshotVersion {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrSnapshot, v, snapshotVersion)
	}
	body := data[:len(data)-4]
	if want, got := binary.BigEndian.Uint32(data[len(body):]), crc32.Checksum(body, castagnoli); want != got {
		return nil, fmt.Errorf("%w: checksum %08x, the bytes sum to %08x", ErrSnapshot, want, got)
	}
	s, err := restore(opt, body[head:])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	return s, nil
}

// snapReader reads a snapshot's fields; each read checks the bytes left.
type snapReader struct {
	b   []byte
	pos int
}

func (r *snapReader) left() int { return len(r.b) - r.pos }

func (r *snapReader) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		if n == 0 {
			return 0, fmt.Errorf("%s: truncated at byte %d", what, r.pos)
		}
		return 0, fmt.Errorf("%s: varint overflows 64 bits at byte %d", what, r.pos)
	}
	r.pos += n
	return v, nil
}

// count reads a count of items taking at least min bytes each.
func (r *snapReader) count(what string, min int) (int, error) {
	v, err := r.uvarint(what)
	if err != nil {
		return 0, err
	}
	if v > uint64(r.left()/min) {
		return 0, fmt.Errorf("%s: %d, more than the %d bytes left can hold", what, v, r.left())
	}
	return int(v), nil
}

func (r *snapReader) take(n int, what string) ([]byte, error) {
	if n < 0 || n > r.left() {
		return nil, fmt.Errorf("%s: %d bytes, %d left", what, n, r.left())
	}
	b := r.b[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

// trimmedResult is a result whose stored message lost its images.
type trimmedResult struct{ entry, result int }

func restore(opt Options, body []byte) (*Session, error) {
	r := &snapReader{b: body}
	s := New(opt)

	n, err := r.count("browser tool count", 1)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, n)
	for range n {
		l, err := r.count("browser tool name length", 1)
		if err != nil {
			return nil, err
		}
		b, _ := r.take(l, "browser tool name")
		names = append(names, string(b))
	}
	if want := fingerprint(s.browser); !slices.Equal(names, want) {
		return nil, fmt.Errorf("taken with browser tools %q, restoring with %q", names, want)
	}

	seq, err := r.uvarint("sequence")
	if err != nil {
		return nil, err
	}
	// An entry takes 7 bytes at least: sequence, form, length, trimmed.
	n, err = r.count("entry count", 7)
	if err != nil {
		return nil, err
	}
	var trimmed []trimmedResult
	var prev uint64
	for i := range n {
		d, err := r.uvarint("entry sequence")
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		es := prev + d
		switch {
		case es < prev:
			return nil, fmt.Errorf("entry %d: sequence overflows", i)
		case i == 0 && es == 0:
			return nil, fmt.Errorf("entry 0: sequence 0")
		case d == 0 && i > 0 && es != s.entries[0].seq:
			// Only a compaction's messages share a sequence, and they come
			// first.
			return nil, fmt.Errorf("entry %d: sequence %d again, after the compaction's", i, es)
		case es > seq:
			return nil, fmt.Errorf("entry %d: sequence %d after the session's %d", i, es, seq)
		}
		prev = es
		msg, results, err := r.message()
		if err != nil {
			return nil, fmt.Errorf("entry %d (seq %d): %w", i, es, err)
		}
		k, err := r.count("trimmed result count", 2)
		if err != nil {
			return nil, fmt.Errorf("entry %d (seq %d): %w", i, es, err)
		}
		last := -1
		for range k {
			ri, err := r.uvarint("trimmed result index")
			if err != nil {
				return nil, fmt.Errorf("entry %d (seq %d): %w", i, es, err)
			}
			images, err := r.uvarint("trimmed result image count")
			if err != nil {
				return nil, fmt.Errorf("entry %d (seq %d): %w", i, es, err)
			}
			if ri >= uint64(len(results)) || int(ri) <= last {
				return nil, fmt.Errorf("entry %d (seq %d): trimmed result %d of %d, after %d", i, es, ri, len(results), last)
			}
			last = int(ri)
			res := &results[ri]
			if omitted := omittedIn(msg, *res); res.images != 0 || images == 0 || images > uint64(omitted) {
				return nil, fmt.Errorf("entry %d (seq %d): result %d trimmed of %d images, but it holds %d images and %d omission notices",
					i, es, ri, images, res.images, omitted)
			}
			res.images = int(images)
			trimmed = append(trimmed, trimmedResult{i, int(ri)})
		}
		s.appendWith(es, msg, results)
	}
	if r.left() != 0 {
		return nil, fmt.Errorf("%d bytes after the last entry", r.left())
	}
	s.seq = seq
	// A stored message lost its images only because the passes trim
	// them: in the restored session they must trim them still.
	for _, t := range trimmed {
		res := s.entries[t.entry].results[t.result]
		if st := s.lookup(res.id); st == nil || !st.paired() || !s.trimmed(t.entry, res) {
			return nil, fmt.Errorf("entry %d (seq %d): result %d is stored trimmed, but the session keeps its images",
				t.entry, s.entries[t.entry].seq, t.result)
		}
	}
	return s, nil
}

// message reads an entry's form and message, and lists its results.
func (r *snapReader) message() (*record.Map, []result, error) {
	form, err := r.take(1, "form")
	if err != nil {
		return nil, nil, err
	}
	lb, err := r.take(4, "message length")
	if err != nil {
		return nil, nil, err
	}
	b, err := r.take(int(min(binary.BigEndian.Uint32(lb), math.MaxInt32)), "message")
	if err != nil {
		return nil, nil, err
	}
	var msg *record.Map
	switch form[0] {
	case formJSON:
		v, err := record.Decoder{MaxBytes: len(b) + 1, MaxDepth: snapshotMaxDepth}.DecodeJSON(b)
		if err != nil {
			return nil, nil, err
		}
		m, ok := v.(*record.Map)
		if !ok {
			return nil, nil, fmt.Errorf("message is %s, not a map", record.TypeName(v))
		}
		msg = m
	case formValue:
		vr := valueReader{b: b, s: string(b)}
		v, err := vr.value(0)
		if err != nil {
			return nil, nil, err
		}
		if vr.pos != len(b) {
			return nil, nil, fmt.Errorf("%d bytes after the message", len(b)-vr.pos)
		}
		m, ok := v.(*record.Map)
		if !ok || m == nil {
			return nil, nil, fmt.Errorf("message is %s, not a map", record.TypeName(v))
		}
		msg = m
	default:
		return nil, nil, fmt.Errorf("form %d", form[0])
	}
	// Entries are pass-1 messages: what rule 5 lets through, as is.
	if kind, role, typ := keyFields(msg); ruleOf(kind, role, typ) != rulePassThrough {
		return nil, nil, fmt.Errorf("not a message pass 1 keeps (role %v, kind %v, type %v)", role, kind, typ)
	}
	return msg, resultsOf(msg), nil
}

// omittedIn counts the omission notices in result r's content: a trimmed
// result had one image for each.
func omittedIn(m *record.Map, r result) int {
	var content any
	if r.block < 0 {
		content, _ = m.Get("content")
	} else {
		c, _ := m.Get("content")
		blk := c.([]any)[r.block].(*record.Map)
		content, _ = blk.Get("content")
	}
	arr, _ := content.([]any)
	n := 0
	for _, e := range arr {
		if b, ok := e.(*record.Map); ok && b.Len() == 2 {
			if t, _ := b.String("type"); t == "text" {
				if x, _ := b.String("text"); x == OmittedImageText {
					n++
				}
			}
		}
	}
	return n
}

// valueReader decodes the value encoding of one message. Its strings
// share s, one copy of the message's bytes, as a decoded record's
// strings share a few blocks.
type valueReader struct {
	b   []byte
	s   string
	pos int
	// reserved counts the bytes the containers being read still need for
	// their remaining elements, one at least each, so that nested
	// containers cannot each promise the same bytes: what a count makes
	// the reader allocate stays within a small multiple of the input.
	reserved int
}

func (r *valueReader) avail() int { return len(r.b) - r.pos - r.reserved }

func (r *valueReader) fail(format string, args ...any) error {
	return fmt.Errorf("message byte %d: %s", r.pos, fmt.Sprintf(format, args...))
}

func (r *valueReader) uvarint() (uint64, error) {
	v, n := binary.Uvarint(r.b[r.pos : len(r.b)-r.reserved])
	if n <= 0 {
		return 0, r.fail("bad varint")
	}
	r.pos += n
	return v, nil
}

// length reads a count of items of min bytes at least each.
func (r *valueReader) length(min int) (int, error) {
	v, err := r.uvarint()
	if err != nil {
		return 0, err
	}
	if v > uint64(r.avail()/min) {
		return 0, r.fail("%d items of %d bytes at least, in %d bytes", v, min, r.avail())
	}
	return int(v), nil
}

// str reads a length and that many bytes of valid UTF-8.
func (r *valueReader) str() (string, error) {
	n, err := r.length(1)
	if err != nil {
		return "", err
	}
	s := r.s[r.pos : r.pos+n]
	if !utf8.ValidString(s) {
		return "", r.fail("invalid UTF-8 in a string")
	}
	r.pos += n
	return s, nil
}

func (r *valueReader) value(depth int) (any, error) {
	if r.avail() < 1 {
		return nil, r.fail("truncated: expected a value")
	}
	tag := r.b[r.pos]
	r.pos++
	switch tag {
	case tagNil:
		return nil, nil
	case tagFalse:
		return false, nil
	case tagTrue:
		return true, nil
	case tagString:
		return r.str()
	case tagInt:
		v, n := binary.Varint(r.b[r.pos : len(r.b)-r.reserved])
		if n <= 0 {
			return nil, r.fail("bad varint")
		}
		r.pos += n
		return v, nil
	case tagUint:
		return r.uvarint()
	case tagFloat:
		if r.avail() < 8 {
			return nil, r.fail("truncated float")
		}
		f := math.Float64frombits(binary.BigEndian.Uint64(r.b[r.pos:]))
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, r.fail("non-finite float")
		}
		r.pos += 8
		return f, nil
	case tagNumber:
		s, err := r.str()
		if err != nil {
			return nil, err
		}
		if _, ok := record.Float(record.Number(s)); !ok {
			return nil, r.fail("invalid number literal %.40q", s)
		}
		return record.Number(s), nil
	case tagArray, tagMap:
		if depth >= snapshotMaxDepth {
			return nil, r.fail("nested deeper than %d", snapshotMaxDepth)
		}
		if tag == tagArray {
			return r.array(depth)
		}
		return r.mapValue(depth)
	}
	return nil, r.fail("unknown tag %d", tag)
}

func (r *valueReader) array(depth int) (any, error) {
	n, err := r.length(1)
	if err != nil {
		return nil, err
	}
	a := make([]any, n)
	outer := r.reserved
	for i := range a {
		r.reserved = outer + n - 1 - i
		if a[i], err = r.value(depth + 1); err != nil {
			return nil, err
		}
	}
	r.reserved = outer
	return a, nil
}

func (r *valueReader) mapValue(depth int) (any, error) {
	// A member takes two bytes at least: its key's length and a value.
	n, err := r.length(2)
	if err != nil {
		return nil, err
	}
	m := &record.Map{Members: make([]record.Member, 0, n)}
	var seen map[string]bool // for long maps; short ones are scanned
	outer := r.reserved
	for i := range n {
		r.reserved = outer + 2*(n-1-i) + 1 // the members after this one, and its value
		key, err := r.str()
		if err != nil {
			return nil, err
		}
		dup := false
		if n <= 16 {
			_, dup = m.Get(key)
		} else {
			if seen == nil {
				seen = map[string]bool{} // grown by the keys read, not the count claimed
			}
			dup, seen[key] = seen[key], true
		}
		if dup {
			return nil, r.fail("key %.40q repeated", key)
		}
		r.reserved--
		v, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		m.Members = append(m.Members, record.Member{Key: key, Value: v})
	}
	r.reserved = outer
	return m, nil
}
