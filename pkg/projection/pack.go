package projection

import (
	"fmt"
	"math"

	"github.com/ctxd/ctxd/pkg/record"
)

// Packing keeps a session in memory about once. Once an entry's rendering
// is in the JSON cache, and the passes can only ever change it in ways
// that its rendering still allows to redo, the decoded message and its
// rendering are let go: the JSON cache holds the entry's bytes, which
// serve every reply while nothing changes. In a session most entries
// settle at once; an assistant message settles when its calls are
// answered or provider-executed (those stay whatever the pairing), a
// screenshot when it is trimmed.
//
// When a packed entry must render again (the latest screenshot is
// trimmed when a newer one arrives, or its result turns out to answer a
// browser call), touch unpacks it: its message is decoded back from its
// JSON bytes. That is exact because only entries whose rendering is their
// message, or their message with images trimmed, are packed, and trimming
// never reverses; and only messages whose values JSON carries with their
// types (see exactInJSON) are packed.
//
// The msgpack and list renderings of a packed entry are decoded from its
// JSON bytes when they are next built.

// unpackDecoder decodes what the JSON encoder wrote: no input limit, and
// no string checked byte by byte, as the bytes are ctxd's own.
var unpackDecoder = record.Decoder{MaxBytes: math.MaxInt, MaxDepth: math.MaxInt32, Trusted: true}

// shareDecoder is unpackDecoder sharing long strings with the JSON cache:
// for a message held only until its images are let go of (trim).
var shareDecoder = record.Decoder{MaxBytes: math.MaxInt, MaxDepth: math.MaxInt32, ShareInput: true, Trusted: true}

// pack lets go of entry i's message and rendering when that loses
// nothing. The JSON cache must hold the entry's current rendering;
// fromJSON says the message was decoded from JSON, which carries it
// exactly.
func (s *Session) pack(i int, fromJSON bool) {
	e := &s.entries[i]
	if e.lazy {
		// Rendered as its record's JSON, which the JSON cache now holds.
		if !e.stale && e.kept {
			e.lazy, e.packed = false, true
			s.msgBytes -= e.size
			e.size = 0
		}
		return
	}
	if e.packed || e.stale || e.out == nil || !restorable(e) || !fromJSON && !exactInJSON(e.msg) {
		return
	}
	e.msg, e.out, e.packed = nil, nil, true
	s.msgBytes -= e.size
	e.size = 0
}

// restorable reports whether entry e's message can be recovered from its
// rendering for any later render: the rendering is the message, or the
// message with some results' images trimmed, which stays trimmed.
func restorable(e *entry) bool {
	if e.out == e.msg {
		return true
	}
	switch e.role {
	case roleResult:
		// Kept and rendered differently: only trimming does that.
		return true
	case roleUser:
		// Trimming replaces blocks; dropping an orphan result removes
		// one, which the rendering cannot give back.
		a, _ := e.msg.Get("content")
		b, _ := e.out.Get("content")
		x, _ := a.([]any)
		y, _ := b.([]any)
		return len(x) == len(y)
	}
	return false
}

// exactInJSON reports whether a value reads back from its JSON encoding
// as the same value of the same types. Only a float64 may not: a whole
// one (3.0 from msgpack) reads back as an integer, which msgpack encodes
// differently, and a non-finite one has no JSON form.
func exactInJSON(v any) bool {
	switch x := v.(type) {
	case float64:
		return x != math.Trunc(x) && !math.IsNaN(x)
	case []any:
		for _, e := range x {
			if !exactInJSON(e) {
				return false
			}
		}
	case *record.Map:
		if x == nil {
			return true
		}
		for _, m := range x.Members {
			if !exactInJSON(m.Value) {
				return false
			}
		}
	}
	return true
}

// unpack decodes packed entry i's message back from the JSON cache, so
// that it can render again.
func (s *Session) unpack(i int) {
	e := &s.entries[i]
	if !e.packed {
		// A lazy entry renders again from its skeleton (lazy.go).
		return
	}
	e.msg, e.packed = s.decodeJSONEntry(i), false
	e.out = e.msg
	e.size = sizeOf(e.msg)
	s.msgBytes += e.size
}

// jsonEntry returns entry i's bytes in the JSON cache, without the
// separator before them.
func (s *Session) jsonEntry(i int) []byte {
	c := &s.json
	end := len(c.bytes)
	if i+1 < len(c.offs) {
		end = c.offs[i+1]
	}
	b := c.bytes[c.offs[i]:end]
	if len(b) > 0 && b[0] == ',' {
		b = b[1:] // the separator before it
	}
	return b
}

// decodeJSONEntry decodes entry i's bytes in the JSON cache.
func (s *Session) decodeJSONEntry(i int) *record.Map {
	m, err := unpackDecoder.Decode(s.jsonEntry(i))
	if err != nil {
		// The bytes are the JSON encoder's own: this is a bug, and going
		// on would serve a different context.
		panic(fmt.Sprintf("projection: packed message from seq %d does not decode: %v", s.entries[i].seq, err))
	}
	return m
}

// outOf returns entry i's rendering, decoding a packed one; nil when the
// passes drop the message.
func (s *Session) outOf(i int) *record.Map {
	if s.entries[i].packed {
		return s.decodeJSONEntry(i)
	}
	s.render(i)
	if s.entries[i].lazy {
		return s.lazyMessage(i) // rendered as itself
	}
	return s.entries[i].out
}
