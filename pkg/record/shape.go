package record

import (
	"bytes"
	"errors"
	"unicode/utf8"
)

// A Shape names the parts of a record that DecodeShape builds, so that a
// reader who looks at a few members of a record need not build the rest.
//
// Of an object, the members named in Keys are built to their shapes, in
// the order they were read; the others are read, checked and left out.
// Of an array, every element is built to Elems, or stands as Skipped when
// Elems is nil, so that the elements keep their positions. A string,
// number or literal is built when Scalars is set, and stands as Skipped
// otherwise. A Whole shape builds the value as Decode does, whatever it is.
type Shape struct {
	Keys    []ShapeKey
	Elems   *Shape
	Scalars bool
	Whole   bool
}

// ShapeKey is one member a Shape builds. Its name must need no escape in
// JSON: a key written with escapes never matches it.
type ShapeKey struct {
	Name  string
	Shape *Shape
}

// Skipped stands for a value that DecodeShape read and checked but did
// not build.
type Skipped struct{}

// WholeShape builds a value whole.
var WholeShape = &Shape{Whole: true}

// noShape stands for a nil Shape given for a whole record.
var noShape Shape

// errShape ends a shaped decode: the input is not canonical JSON, or not
// valid, and DecodeShape says no.
var errShape = errors.New("record: not canonical JSON")

// DecodeShape decodes a JSON object to sh: it returns the object with only
// the parts sh names built (see Shape), and true, when data is valid
// canonical JSON within the decoder's limits, as DecodeCanonical would
// find it. Then Decode builds the whole record from data, the parts sh
// names equal to those returned. Otherwise it returns false, as soon as
// it finds out: the record may be invalid, or only written otherwise
// (with white space, or msgpack), and DecodeCanonical tells which.
//
// It costs a fraction of a whole decode: a record is read once, and only
// what sh names is built. The strings built share the input as the
// decoder's ShareInput and ShareShort say.
func (d Decoder) DecodeShape(data []byte, sh *Shape) (*Map, bool) {
	p := jsonParsers.Get().(*jsonParser)
	defer p.release()
	p.sparse = true
	return d.decodeShape(p, data, sh)
}

func (d Decoder) decodeShape(p *jsonParser, data []byte, sh *Shape) (*Map, bool) {
	if sh == nil {
		sh = &noShape // a record is a map: built as one, with no members
	}
	maxBytes, maxDepth := d.limits()
	if len(data) < 2 || len(data) > maxBytes || data[0] != '{' || maxDepth < 1 {
		return nil, false
	}
	p.data, p.pos, p.maxDepth, p.canonical, p.backslash = data, 0, maxDepth, true, -1
	p.strs.share, p.strs.all = d.ShareInput, d.ShareShort
	v, err := p.shaped(0, sh)
	if err != nil || p.pos != len(data) || !p.canonical {
		return nil, false
	}
	return v.(*Map), true
}

// A ShapeReader is DecodeShape for a reader that is done with each
// record's skeleton before it reads the next: it builds every skeleton in
// the same memory, and so allocates nothing once that is large enough.
// What Decode returns, strings and all, is valid only until the next
// Decode: the caller copies out anything it keeps. A ShapeReader is not
// safe for concurrent use.
type ShapeReader struct {
	d  Decoder
	sh *Shape
	p  jsonParser
}

// ShapeReader returns a reader of records to sh with the decoder's limits
// and sharing.
func (d Decoder) ShapeReader(sh *Shape) *ShapeReader {
	return &ShapeReader{d: d, sh: sh, p: jsonParser{transient: true}}
}

// Decode is DecodeShape of data, in the reader's memory.
func (r *ShapeReader) Decode(data []byte) (*Map, bool) {
	r.Clear()
	m, ok := r.d.decodeShape(&r.p, data, r.sh)
	r.p.data = nil
	return m, ok
}

// Clear lets go of the last skeleton, so that the reader holds nothing of
// the last record (a long string shared with its input holds the whole
// input): what Decode returned is invalid from now on.
func (r *ShapeReader) Clear() {
	p := &r.p
	p.clearScratch()
	p.mapSlab.rewind()
	p.memberSlab.rewind()
	p.elemSlab.rewind()
	p.boxes.rewind()
	p.strs.block = p.strs.block[:0]
}

// shaped reads the value at p.pos and builds it to sh, as value does at
// depth.
func (p *jsonParser) shaped(depth int, sh *Shape) (any, error) {
	switch {
	case sh == nil:
		return Skipped{}, p.skip(depth)
	case sh.Whole:
		v, err := p.value(depth)
		if err == nil && !p.canonical {
			err = errShape
		}
		return v, err
	}
	if p.pos >= len(p.data) {
		return nil, errShape
	}
	switch p.data[p.pos] {
	case '{':
		if depth >= p.maxDepth {
			return nil, errShape
		}
		return p.shapedObject(depth+1, sh)
	case '[':
		if depth >= p.maxDepth {
			return nil, errShape
		}
		return p.shapedArray(depth+1, sh)
	}
	if !sh.Scalars {
		return Skipped{}, p.skip(depth)
	}
	v, err := p.value(depth)
	if err == nil && !p.canonical {
		err = errShape
	}
	return v, err
}

func (p *jsonParser) shapedObject(depth int, sh *Shape) (any, error) {
	data := p.data
	p.pos++ // '{'
	base := len(p.members)
	keysBase := len(p.keys) // an error leaves p.keys to release
	if p.pos < len(data) && data[p.pos] == '}' {
		p.pos++
		return &Map{}, nil
	}
	for {
		start, end, err := p.key(keysBase)
		if err != nil {
			return nil, err
		}
		var child *Shape
		name := ""
		for _, k := range sh.Keys {
			if len(k.Name) == end-start && string(data[start:end]) == k.Name {
				child, name = k.Shape, k.Name
				break
			}
		}
		if child == nil {
			err = p.skip(depth)
		} else {
			var v any
			v, err = p.shaped(depth, child)
			p.members = append(p.members, Member{Key: name, Value: v})
		}
		if err != nil {
			return nil, err
		}
		if end, err := p.next('}'); err != nil {
			return nil, err
		} else if end {
			p.keys = p.keys[:keysBase]
			return p.mapOf(base), nil
		}
	}
}

// next reads what follows a member or an element: a comma, or close,
// which ends the map or array (end).
func (p *jsonParser) next(close byte) (end bool, err error) {
	if p.pos >= len(p.data) {
		return false, errShape
	}
	switch p.data[p.pos] {
	case ',':
		p.pos++
		return false, nil
	case close:
		p.pos++
		return true, nil
	}
	return false, errShape
}

func (p *jsonParser) shapedArray(depth int, sh *Shape) (any, error) {
	data := p.data
	p.pos++ // '['
	if p.pos < len(data) && data[p.pos] == ']' {
		p.pos++
		return []any{}, nil
	}
	base := len(p.elems)
	for {
		v, err := p.shaped(depth, sh.Elems)
		if err != nil {
			return nil, err
		}
		p.elems = append(p.elems, v)
		if end, err := p.next(']'); err != nil {
			return nil, err
		} else if end {
			a := p.arrayOf(base)
			if p.transient {
				// Boxed in the reader's memory too.
				return p.boxes.slice(a, p.left(p.pos)), nil
			}
			return a, nil
		}
	}
}

// key reads a member's key and the colon after it, and returns where the
// key's bytes are, escapes as written. A key written before in the same
// object (since keysBase) ends the decode: canonical JSON has none. Two
// keys that are the same string are the same bytes when both are
// canonical, which every key read so far is.
func (p *jsonParser) key(keysBase int) (start, end int, err error) {
	data := p.data
	if p.pos >= len(data) || data[p.pos] != '"' {
		return 0, 0, errShape
	}
	if start, end, err = p.skipString(); err != nil {
		return 0, 0, err
	}
	if p.pos >= len(data) || data[p.pos] != ':' {
		return 0, 0, errShape
	}
	p.pos++
	k := data[start:end]
	for _, prev := range p.keys[keysBase:] {
		if prev.end-prev.start == len(k) && bytes.Equal(data[prev.start:prev.end], k) {
			return 0, 0, errShape
		}
	}
	if len(p.keys)-keysBase >= maxShapeKeys {
		// A map this wide is no message: the linear check above would
		// cost its square, where a whole decode indexes the keys.
		return 0, 0, errShape
	}
	p.keys = append(p.keys, span{start, end})
	return start, end, nil
}

// maxShapeKeys is the most members an object may have in a shaped
// decode; a wider one is left to a whole decode. At most 496 key
// comparisons an object: a record of many wide maps costs a shaped
// decode about what it costs a whole one.
const maxShapeKeys = 32

// span is where a key's bytes are in the input.
type span struct{ start, end int }

// skip reads the value at p.pos, checking it as value does at depth,
// without building it.
func (p *jsonParser) skip(depth int) error {
	data := p.data
	if p.pos >= len(data) {
		return errShape
	}
	switch c := data[p.pos]; {
	case c == '"':
		_, _, err := p.skipString()
		return err
	case c == '{':
		if depth >= p.maxDepth {
			return errShape
		}
		p.pos++
		if p.pos < len(data) && data[p.pos] == '}' {
			p.pos++
			return nil
		}
		keysBase := len(p.keys) // an error leaves p.keys to release
		for {
			if _, _, err := p.key(keysBase); err != nil {
				return err
			}
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			if end, err := p.next('}'); err != nil || end {
				p.keys = p.keys[:keysBase]
				return err
			}
		}
	case c == '[':
		if depth >= p.maxDepth {
			return errShape
		}
		p.pos++
		if p.pos < len(data) && data[p.pos] == ']' {
			p.pos++
			return nil
		}
		for {
			if err := p.skip(depth + 1); err != nil {
				return err
			}
			if end, err := p.next(']'); err != nil || end {
				return err
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		end := numberEnd(data, p.pos)
		if end < 0 {
			return errShape
		}
		p.pos = end
		return nil
	case c == 't':
		return p.skipLiteral("true")
	case c == 'f':
		return p.skipLiteral("false")
	case c == 'n':
		return p.skipLiteral("null")
	}
	return errShape
}

func (p *jsonParser) skipLiteral(word string) error {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return errShape
	}
	p.pos += len(word)
	return nil
}

// skipString reads a string literal at p.pos, checking it as str does,
// and returns where its bytes are, escapes as written. An escape that
// AppendJSONString would not write ends the decode.
func (p *jsonParser) skipString() (start, end int, err error) {
	data := p.data
	start = p.pos + 1
	for i := start; ; {
		e, ascii := scanJSONString(data, i)
		if !ascii && !utf8.Valid(data[i:e]) {
			return 0, 0, errShape
		}
		if e >= len(data) || data[e] < 0x20 {
			return 0, 0, errShape
		}
		if data[e] == '"' {
			p.pos = e + 1
			return start, e, nil
		}
		p.pos = e // a backslash
		buf, err := p.escape(p.buf[:0])
		p.buf = buf
		if err != nil || !p.canonical {
			return 0, 0, errShape
		}
		i = p.pos
	}
}

// numberEnd returns where the JSON number starting at data[i] ends, or -1
// when none does: the grammar number reads.
func numberEnd(data []byte, i int) int {
	if data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return -1
	case data[i] == '0':
		i++
	case data[i] >= '1' && data[i] <= '9':
		i = skipDigits(data, i+1)
	default:
		return -1
	}
	if i < len(data) && data[i] == '.' {
		d := skipDigits(data, i+1)
		if d == i+1 {
			return -1
		}
		i = d
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		d := skipDigits(data, i)
		if d == i {
			return -1
		}
		i = d
	}
	return i
}
