package projection

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"

	"github.com/ctxd/ctxd/pkg/record"
)

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

// trimmedResult is a result whose stored message lost its images.
type trimmedResult struct{ entry, result int }

func restore(opt Options, body []byte) (*Session, error) {
	r := record.NewBinaryReader(body)
	s := New(opt)

	n, err := r.Count("browser tool count", 1)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, n)
	for range n {
		l, err := r.Count("browser tool name length", 1)
		if err != nil {
			return nil, err
		}
		b, _ := r.Take(l, "browser tool name")
		names = append(names, string(b))
	}
	if want := fingerprint(s.browser); !slices.Equal(names, want) {
		return nil, fmt.Errorf("taken with browser tools %q, restoring with %q", names, want)
	}

	seq, err := r.Uvarint("sequence")
	if err != nil {
		return nil, err
	}
	// An entry takes 7 bytes at least: sequence, form, length, trimmed.
	n, err = r.Count("entry count", 7)
	if err != nil {
		return nil, err
	}
	var trimmed []trimmedResult
	var prev uint64
	for i := range n {
		d, err := r.Uvarint("entry sequence")
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
		msg, results, err := readMessage(r)
		if err != nil {
			return nil, fmt.Errorf("entry %d (seq %d): %w", i, es, err)
		}
		k, err := r.Count("trimmed result count", 2)
		if err != nil {
			return nil, fmt.Errorf("entry %d (seq %d): %w", i, es, err)
		}
		last := -1
		for range k {
			ri, err := r.Uvarint("trimmed result index")
			if err != nil {
				return nil, fmt.Errorf("entry %d (seq %d): %w", i, es, err)
			}
			images, err := r.Uvarint("trimmed result image count")
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
		s.appendWith(es, msg, results, false)
	}
	if r.Left() != 0 {
		return nil, fmt.Errorf("%d bytes after the last entry", r.Left())
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

// readMessage reads an entry's form and message, and lists its results.
func readMessage(r *record.BinaryReader) (*record.Map, []result, error) {
	form, err := r.Take(1, "form")
	if err != nil {
		return nil, nil, err
	}
	lb, err := r.Take(4, "message length")
	if err != nil {
		return nil, nil, err
	}
	b, err := r.Take(int(min(binary.BigEndian.Uint32(lb), math.MaxInt32)), "message")
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
		vr := record.NewBinaryReader(b)
		v, err := vr.Value(snapshotMaxDepth)
		if err != nil {
			return nil, nil, fmt.Errorf("message: %w", err)
		}
		if vr.Left() != 0 {
			return nil, nil, fmt.Errorf("%d bytes after the message", vr.Left())
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
