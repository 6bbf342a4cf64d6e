package protocol

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
)

// Delta replies (PROTOCOL.md, "Delta replies"). A reply asked with
// digest, or with have_seq and have_digest, carries "digest": the hex of
//
//	c_0 = 32 zero bytes, c_{i+1} = SHA-256(c_i || E_i), digest = SHA-256(c_n || S)
//
// where E_i is the i-th element of the body's message array (messages,
// input, contents) exactly as the reply encodes it, and S the value of
// the body's other field (system, systemInstruction) as encoded, empty
// without one. A reply that says "delta": {"keep": K} holds in its array
// only the elements from K on: the client's first K come before them.

// DigestLen is the length of a digest: 64 hex digits.
const DigestLen = 2 * sha256.Size

// Chain is the hash of a prefix of a message array: c_i above.
type Chain [sha256.Size]byte

// Next returns the chain of the prefix followed by the element elem.
func (c Chain) Next(elem []byte) Chain {
	h := sha256.New()
	h.Write(c[:])
	h.Write(elem)
	var out Chain
	h.Sum(out[:0])
	return out
}

// Digest returns the digest of an array whose chain is c, with other
// the encoding of the body's other field (nil for none).
func (c Chain) Digest(other []byte) string {
	h := sha256.New()
	h.Write(c[:])
	h.Write(other)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// ErrBadReply is wrapped by the errors of a reply that cannot be read
// as a context reply (ReadReply, ApplyDelta).
var ErrBadReply = errors.New("bad context reply")

// arrayKeys are the keys of the message arrays of the formats; otherKeys
// of the body's field beside it.
var arrayKeys = []string{"messages", "input", "contents"}
var otherKeys = []string{"system", "systemInstruction"}

// Member is a member of a reply: its key, and where its value lies.
type Member struct {
	Key              string
	KeyStart, KeyEnd int // the key as encoded: reply[KeyStart:KeyEnd]
	Start, End       int // the value: reply[Start:End]
}

// Reply is where a context reply's parts lie in its bytes.
type Reply struct {
	Msgpack bool
	Members []Member
	// Array is the index in Members of the message array; Items where
	// each of its elements lies.
	Array int
	Items [][2]int
	// Other is the index in Members of the body's other field, or -1.
	Other int
	// Keep is the delta's keep when HasDelta.
	Keep     uint64
	HasDelta bool
	// Digest is the reply's digest, "" without one.
	Digest string
	// Seq is the reply's seq.
	Seq uint64
}

// ReadReply finds the parts of a context reply, JSON or msgpack (by
// its first byte). It reads no more than it needs to split the reply:
// the values are checked to be well formed, not decoded.
func ReadReply(b []byte) (Reply, error) {
	r := Reply{Array: -1, Other: -1}
	if len(b) == 0 {
		return r, fmt.Errorf("%w: empty", ErrBadReply)
	}
	if b[0] == '{' {
		if err := r.readJSON(b); err != nil {
			return r, err
		}
	} else {
		r.Msgpack = true
		if err := r.readMsgpack(b); err != nil {
			return r, err
		}
	}
	if r.Array < 0 {
		return r, fmt.Errorf("%w: no message array", ErrBadReply)
	}
	return r, nil
}

func (r *Reply) readJSON(b []byte) error {
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == '}' {
		return r.end(b, i+1)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return fmt.Errorf("%w: a key expected at byte %d", ErrBadReply, i)
		}
		ks := i
		ke, err := skipJSON(b, i, 0)
		if err != nil {
			return err
		}
		key, err := strconv.Unquote(string(b[i:ke]))
		if err != nil {
			return fmt.Errorf("%w: key at byte %d: %v", ErrBadReply, i, err)
		}
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return fmt.Errorf("%w: ':' expected at byte %d", ErrBadReply, i)
		}
		vs := skipSpace(b, i+1)
		ve, err := skipJSON(b, vs, 0)
		if err != nil {
			return err
		}
		if err := r.member(b, key, ks, ke, vs, ve); err != nil {
			return err
		}
		i = skipSpace(b, ve)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return r.end(b, i+1)
		}
		return fmt.Errorf("%w: ',' or '}' expected at byte %d", ErrBadReply, i)
	}
}

func (r *Reply) end(b []byte, i int) error {
	if skipSpace(b, i) != len(b) {
		return fmt.Errorf("%w: bytes after the reply at %d", ErrBadReply, i)
	}
	return nil
}

func (r *Reply) readMsgpack(b []byte) error {
	n, i, err := mapLen(b, 0)
	if err != nil {
		return err
	}
	for range n {
		kl, ks, err := strLen(b, i)
		if err != nil {
			return fmt.Errorf("%w: a key expected at byte %d", ErrBadReply, i)
		}
		key := string(b[ks : ks+kl])
		vs := ks + kl
		ve, err := skipMsgpack(b, vs)
		if err != nil {
			return err
		}
		if err := r.member(b, key, i, vs, vs, ve); err != nil {
			return err
		}
		i = ve
	}
	if i != len(b) {
		return fmt.Errorf("%w: bytes after the reply at %d", ErrBadReply, i)
	}
	return nil
}

// member notes a member; the array, delta, digest and seq are read.
func (r *Reply) member(b []byte, key string, ks, ke, vs, ve int) error {
	for _, m := range r.Members {
		if m.Key == key {
			return fmt.Errorf("%w: %s twice", ErrBadReply, key)
		}
	}
	r.Members = append(r.Members, Member{Key: key, KeyStart: ks, KeyEnd: ke, Start: vs, End: ve})
	v := b[vs:ve]
	var err error
	switch {
	case contains(arrayKeys, key):
		if r.Array >= 0 {
			return fmt.Errorf("%w: two message arrays", ErrBadReply)
		}
		r.Array = len(r.Members) - 1
		r.Items, err = r.items(b, vs, ve)
	case contains(otherKeys, key):
		r.Other = len(r.Members) - 1
	case key == "seq":
		r.Seq, err = r.uint(v, key)
	case key == "digest":
		r.Digest, err = r.str(v, key)
	case key == "delta":
		r.HasDelta = true
		r.Keep, err = r.keep(v)
	}
	return err
}

func (r *Reply) items(b []byte, vs, ve int) ([][2]int, error) {
	items := [][2]int{}
	if r.Msgpack {
		n, i, err := arrayLen(b, vs)
		if err != nil {
			return nil, err
		}
		for range n {
			e, err := skipMsgpack(b, i)
			if err != nil {
				return nil, err
			}
			items = append(items, [2]int{i, e})
			i = e
		}
		return items, nil
	}
	if b[vs] != '[' {
		return nil, fmt.Errorf("%w: the message array is not an array", ErrBadReply)
	}
	i := skipSpace(b, vs+1)
	if i < ve-1 {
		for {
			e, err := skipJSON(b, i, 0)
			if err != nil {
				return nil, err
			}
			items = append(items, [2]int{i, e})
			i = skipSpace(b, e)
			if b[i] != ',' {
				break
			}
			i = skipSpace(b, i+1)
		}
	}
	return items, nil
}

func (r *Reply) uint(v []byte, key string) (uint64, error) {
	if !r.Msgpack {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %s is not an unsigned integer", ErrBadReply, key)
		}
		return n, nil
	}
	switch c := v[0]; {
	case c <= 0x7f:
		return uint64(c), nil
	case c == 0xcc && len(v) == 2:
		return uint64(v[1]), nil
	case c == 0xcd && len(v) == 3:
		return uint64(binary.BigEndian.Uint16(v[1:])), nil
	case c == 0xce && len(v) == 5:
		return uint64(binary.BigEndian.Uint32(v[1:])), nil
	case c == 0xcf && len(v) == 9:
		return binary.BigEndian.Uint64(v[1:]), nil
	}
	return 0, fmt.Errorf("%w: %s is not an unsigned integer", ErrBadReply, key)
}

func (r *Reply) str(v []byte, key string) (string, error) {
	if !r.Msgpack {
		s, err := strconv.Unquote(string(v))
		if err != nil || v[0] != '"' {
			return "", fmt.Errorf("%w: %s is not a string", ErrBadReply, key)
		}
		return s, nil
	}
	n, s, err := strLen(v, 0)
	if err != nil || s+n != len(v) {
		return "", fmt.Errorf("%w: %s is not a string", ErrBadReply, key)
	}
	return string(v[s:]), nil
}

// keep reads {"keep": K}.
func (r *Reply) keep(v []byte) (uint64, error) {
	d := Reply{Msgpack: r.Msgpack, Array: -1, Other: -1}
	var err error
	if r.Msgpack {
		err = d.readMsgpackDelta(v)
	} else {
		err = d.readJSONDelta(v)
	}
	if err != nil {
		return 0, err
	}
	return d.Keep, nil
}

func (d *Reply) readJSONDelta(v []byte) error {
	if v[0] != '{' {
		return fmt.Errorf("%w: delta is not an object", ErrBadReply)
	}
	i := skipSpace(v, 1)
	if i >= len(v) || v[i] != '"' {
		return fmt.Errorf("%w: delta has no keep", ErrBadReply)
	}
	ke, err := skipJSON(v, i, 0)
	if err != nil || string(v[i:ke]) != `"keep"` {
		return fmt.Errorf("%w: delta has no keep", ErrBadReply)
	}
	i = skipSpace(v, ke)
	if i >= len(v) || v[i] != ':' {
		return fmt.Errorf("%w: delta has no keep", ErrBadReply)
	}
	vs := skipSpace(v, i+1)
	ve, err := skipJSON(v, vs, 0)
	if err != nil {
		return err
	}
	if skipSpace(v, ve) != len(v)-1 {
		return fmt.Errorf("%w: delta holds more than keep", ErrBadReply)
	}
	d.Keep, err = d.uint(v[vs:ve], "delta keep")
	return err
}

func (d *Reply) readMsgpackDelta(v []byte) error {
	n, i, err := mapLen(v, 0)
	if err != nil || n != 1 {
		return fmt.Errorf("%w: delta is not a map of keep", ErrBadReply)
	}
	kl, ks, err := strLen(v, i)
	if err != nil || string(v[ks:ks+kl]) != "keep" {
		return fmt.Errorf("%w: delta has no keep", ErrBadReply)
	}
	d.Keep, err = d.uint(v[ks+kl:], "delta keep")
	return err
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Chain returns the chain of the reply's first n elements.
func (r *Reply) Chain(b []byte, n int) Chain {
	var c Chain
	for _, it := range r.Items[:n] {
		c = c.Next(b[it[0]:it[1]])
	}
	return c
}

// OtherBytes returns the encoding of the body's other field, nil without one.
func (r *Reply) OtherBytes(b []byte) []byte {
	if r.Other < 0 {
		return nil
	}
	m := r.Members[r.Other]
	return b[m.Start:m.End]
}

// ComputeDigest returns the digest of a whole reply (one without delta)
// from its bytes, as the service computes it.
func ComputeDigest(b []byte) (string, error) {
	r, err := ReadReply(b)
	if err != nil {
		return "", err
	}
	if r.HasDelta {
		return "", fmt.Errorf("%w: a delta reply has no digest of its own array", ErrBadReply)
	}
	return r.Chain(b, len(r.Items)).Digest(r.OtherBytes(b)), nil
}

// ApplyDelta returns the whole reply that the delta reply stands for,
// given the reply held (a whole one, in the same encoding): the delta's
// members in its order, without delta, its message array preceded by
// the held reply's first keep elements. The result is checked against
// the delta's digest: a mismatch is an error, never a wrong context. A
// reply without delta is returned as it is.
func ApplyDelta(held, delta []byte) ([]byte, error) {
	d, err := ReadReply(delta)
	if err != nil {
		return nil, err
	}
	if !d.HasDelta {
		return delta, nil
	}
	h, err := Hold(held)
	if err != nil {
		return nil, fmt.Errorf("the reply held: %w", err)
	}
	next, err := h.apply(delta, d)
	if err != nil {
		return nil, err
	}
	return next.Body, nil
}

// Held is a whole reply held to apply the next delta to: its bytes, its
// parts, and the chain of every prefix of its array, so that a delta
// costs what it holds, not what the reply holds.
type Held struct {
	Body  []byte
	Reply Reply
	chain []Chain // chain[i]: the first i+1 elements'
	// extended is set once a Held made from this one appended to chain
	// in place (only the first may: what it appends lies past chain).
	extended atomic.Bool
}

// Hold reads a whole reply to hold.
func Hold(body []byte) (*Held, error) {
	r, err := ReadReply(body)
	if err != nil {
		return nil, err
	}
	if r.HasDelta {
		return nil, fmt.Errorf("%w: a delta reply is not whole", ErrBadReply)
	}
	h := &Held{Body: body, Reply: r, chain: make([]Chain, 0, len(r.Items))}
	var c Chain
	for _, it := range r.Items {
		c = c.Next(body[it[0]:it[1]])
		h.chain = append(h.chain, c)
	}
	return h, nil
}

// Apply returns the whole reply a reply stands for: the reply itself
// when it is whole, else the delta applied to h, checked against its
// digest. h is not changed.
func (h *Held) Apply(reply []byte) (*Held, error) {
	d, err := ReadReply(reply)
	if err != nil {
		return nil, err
	}
	if !d.HasDelta {
		return Hold(reply)
	}
	return h.apply(reply, d)
}

func (h *Held) apply(delta []byte, d Reply) (*Held, error) {
	if h.Reply.Msgpack != d.Msgpack {
		return nil, fmt.Errorf("%w: the reply held and the delta differ in encoding", ErrBadReply)
	}
	if d.Keep > uint64(len(h.Reply.Items)) {
		return nil, fmt.Errorf("%w: delta keeps %d messages, the reply held has %d", ErrBadReply, d.Keep, len(h.Reply.Items))
	}
	held := h.Body
	keep := int(d.Keep)
	n := keep + len(d.Items)
	next := &Held{Reply: Reply{Msgpack: d.Msgpack, Array: -1, Other: -1, Seq: d.Seq, Digest: d.Digest}}
	next.Reply.Items = make([][2]int, 0, n)
	size := len(delta)
	if keep > 0 {
		size += h.Reply.Items[keep-1][1] - h.Reply.Items[0][0]
	}
	out := make([]byte, 0, size)
	if d.Msgpack {
		out = appendMapLen(out, len(d.Members)-1)
	} else {
		out = append(out, '{')
	}
	first := true
	for mi, m := range d.Members {
		if m.Key == "delta" {
			continue
		}
		if !d.Msgpack && !first {
			out = append(out, ',')
		}
		first = false
		nm := Member{Key: m.Key, KeyStart: len(out)}
		out = append(out, delta[m.KeyStart:m.KeyEnd]...)
		nm.KeyEnd = len(out)
		if !d.Msgpack {
			out = append(out, ':')
		}
		nm.Start = len(out)
		switch {
		case mi == d.Array:
			next.Reply.Array = len(next.Reply.Members)
			if d.Msgpack {
				out = appendArrayLen(out, n)
			} else {
				out = append(out, '[')
			}
			if keep > 0 {
				// The elements held lie together, with their separators.
				at := len(out)
				from := h.Reply.Items[0][0]
				out = append(out, held[from:h.Reply.Items[keep-1][1]]...)
				for _, it := range h.Reply.Items[:keep] {
					next.Reply.Items = append(next.Reply.Items, [2]int{it[0] - from + at, it[1] - from + at})
				}
			}
			for i, it := range d.Items {
				if (keep > 0 || i > 0) && !d.Msgpack {
					out = append(out, ',')
				}
				at := len(out)
				out = append(out, delta[it[0]:it[1]]...)
				next.Reply.Items = append(next.Reply.Items, [2]int{at, len(out)})
			}
			if !d.Msgpack {
				out = append(out, ']')
			}
		default:
			if mi == d.Other {
				next.Reply.Other = len(next.Reply.Members)
			}
			out = append(out, delta[m.Start:m.End]...)
		}
		nm.End = len(out)
		next.Reply.Members = append(next.Reply.Members, nm)
	}
	if !d.Msgpack {
		out = append(out, '}')
	}
	next.Body = out
	if keep == len(h.chain) && h.extended.CompareAndSwap(false, true) {
		next.chain = h.chain
	} else {
		next.chain = make([]Chain, keep, n)
		copy(next.chain, h.chain[:keep])
	}
	var c Chain
	if keep > 0 {
		c = next.chain[keep-1]
	}
	for _, it := range d.Items {
		c = c.Next(delta[it[0]:it[1]])
		next.chain = append(next.chain, c)
	}
	if d.Digest != "" {
		if got := c.Digest(d.OtherBytes(delta)); got != d.Digest {
			return nil, fmt.Errorf("%w: the context made from the delta has digest %s, the reply says %s", ErrBadReply, got, d.Digest)
		}
	}
	return next, nil
}

// skipSpace skips JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// maxDepth bounds the nesting skipJSON follows.
const maxDepth = 10000

// skipJSON returns where the JSON value at b[i] ends. It checks the
// structure (brackets, strings), not the scalars' spelling.
func skipJSON(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("%w: a value expected at byte %d", ErrBadReply, i)
	}
	switch c := b[i]; c {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
		return 0, fmt.Errorf("%w: a string at byte %d does not end", ErrBadReply, i)
	case '[', '{':
		if depth >= maxDepth {
			return 0, fmt.Errorf("%w: nested too deep at byte %d", ErrBadReply, i)
		}
		close := byte(']')
		if c == '{' {
			close = '}'
		}
		j := skipSpace(b, i+1)
		if j < len(b) && b[j] == close {
			return j + 1, nil
		}
		for {
			var err error
			if c == '{' {
				if j >= len(b) || b[j] != '"' {
					return 0, fmt.Errorf("%w: a key expected at byte %d", ErrBadReply, j)
				}
				if j, err = skipJSON(b, j, depth+1); err != nil {
					return 0, err
				}
				j = skipSpace(b, j)
				if j >= len(b) || b[j] != ':' {
					return 0, fmt.Errorf("%w: ':' expected at byte %d", ErrBadReply, j)
				}
				j = skipSpace(b, j+1)
			}
			if j, err = skipJSON(b, j, depth+1); err != nil {
				return 0, err
			}
			j = skipSpace(b, j)
			if j < len(b) && b[j] == ',' {
				j = skipSpace(b, j+1)
				continue
			}
			if j < len(b) && b[j] == close {
				return j + 1, nil
			}
			return 0, fmt.Errorf("%w: ',' or '%c' expected at byte %d", ErrBadReply, close, j)
		}
	default:
		j := i
		for j < len(b) && (b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] >= '0' && b[j] <= '9' || b[j] >= 'a' && b[j] <= 'z' || b[j] >= 'A' && b[j] <= 'Z') {
			j++
		}
		if j == i {
			return 0, fmt.Errorf("%w: a value expected at byte %d", ErrBadReply, i)
		}
		return j, nil
	}
}

// skipMsgpack returns where the msgpack object at b[i] ends.
func skipMsgpack(b []byte, i int) (int, error) {
	left := 1 // objects still to skip
	for left > 0 {
		if i >= len(b) {
			return 0, fmt.Errorf("%w: msgpack ends inside an object", ErrBadReply)
		}
		left--
		c := b[i]
		var size, items int // bytes after the header byte, objects inside
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			items = 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			items = int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			size = int(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			n, err := lenAt(b, i+1, 1)
			if err != nil {
				return 0, err
			}
			size = 1 + n
		case c == 0xc5 || c == 0xda:
			n, err := lenAt(b, i+1, 2)
			if err != nil {
				return 0, err
			}
			size = 2 + n
		case c == 0xc6 || c == 0xdb:
			n, err := lenAt(b, i+1, 4)
			if err != nil {
				return 0, err
			}
			size = 4 + n
		case c == 0xc7 || c == 0xc8 || c == 0xc9:
			w := 1 << (c - 0xc7)
			n, err := lenAt(b, i+1, w)
			if err != nil {
				return 0, err
			}
			size = w + 1 + n
		case c == 0xca:
			size = 4
		case c == 0xcb:
			size = 8
		case c >= 0xcc && c <= 0xcf:
			size = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			size = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8:
			size = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xde:
			n, err := lenAt(b, i+1, 2)
			if err != nil {
				return 0, err
			}
			size, items = 2, n
			if c == 0xde {
				items *= 2
			}
		case c == 0xdd || c == 0xdf:
			n, err := lenAt(b, i+1, 4)
			if err != nil {
				return 0, err
			}
			size, items = 4, n
			if c == 0xdf {
				items *= 2
			}
		default:
			return 0, fmt.Errorf("%w: byte 0x%02x at %d is not msgpack", ErrBadReply, c, i)
		}
		if size > len(b)-i-1 {
			return 0, fmt.Errorf("%w: msgpack ends inside an object", ErrBadReply)
		}
		i += 1 + size
		left += items
		if left > len(b)-i {
			// Every object takes a byte at least.
			return 0, fmt.Errorf("%w: msgpack ends inside an object", ErrBadReply)
		}
	}
	return i, nil
}

// lenAt reads a big-endian length of w bytes at b[i].
func lenAt(b []byte, i, w int) (int, error) {
	if i+w > len(b) {
		return 0, fmt.Errorf("%w: msgpack ends inside a length", ErrBadReply)
	}
	var n uint64
	for _, c := range b[i : i+w] {
		n = n<<8 | uint64(c)
	}
	if n > uint64(len(b)) {
		return 0, fmt.Errorf("%w: a msgpack length past the end", ErrBadReply)
	}
	return int(n), nil
}

// mapLen reads a msgpack map header at b[i]: its entries, and where they
// start.
func mapLen(b []byte, i int) (int, int, error) {
	return header(b, i, 0x80, 0xde, "map")
}

// arrayLen reads a msgpack array header.
func arrayLen(b []byte, i int) (int, int, error) {
	return header(b, i, 0x90, 0xdc, "array")
}

func header(b []byte, i int, fix, w16 byte, what string) (int, int, error) {
	if i >= len(b) {
		return 0, 0, fmt.Errorf("%w: a msgpack %s expected", ErrBadReply, what)
	}
	switch c := b[i]; {
	case c&0xf0 == fix:
		return int(c & 0x0f), i + 1, nil
	case c == w16:
		n, err := lenAt(b, i+1, 2)
		return n, i + 3, err
	case c == w16+1:
		n, err := lenAt(b, i+1, 4)
		return n, i + 5, err
	}
	return 0, 0, fmt.Errorf("%w: a msgpack %s expected at byte %d", ErrBadReply, what, i)
}

// strLen reads a msgpack string header: its length and where it starts.
func strLen(b []byte, i int) (int, int, error) {
	if i >= len(b) {
		return 0, 0, fmt.Errorf("%w: a msgpack string expected", ErrBadReply)
	}
	var n, s int
	var err error
	switch c := b[i]; {
	case c >= 0xa0 && c <= 0xbf:
		n, s = int(c&0x1f), i+1
	case c == 0xd9:
		n, err = lenAt(b, i+1, 1)
		s = i + 2
	case c == 0xda:
		n, err = lenAt(b, i+1, 2)
		s = i + 3
	case c == 0xdb:
		n, err = lenAt(b, i+1, 4)
		s = i + 5
	default:
		return 0, 0, fmt.Errorf("%w: a msgpack string expected at byte %d", ErrBadReply, i)
	}
	if err == nil && s+n > len(b) {
		err = fmt.Errorf("%w: a msgpack string past the end", ErrBadReply)
	}
	return n, s, err
}

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n < 1<<16:
		return append(b, 0xde, byte(n>>8), byte(n))
	}
	return append(b, 0xdf, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n < 1<<16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	}
	return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// Located is where a reply's message array lies (Locate).
type Located struct {
	Msgpack bool
	// ArrayAt is where the array starts: its '[' or msgpack header;
	// ItemsAt where its first item starts; Count the items, from the
	// msgpack header (-1 in JSON).
	ArrayAt, ItemsAt, Count int
	// Other is the encoding of the body's other field, nil without one.
	Other []byte
}

// Locate finds a reply's message array, reading the members before it
// and not its items: what comes before the array is small, the array
// may not be.
func Locate(b []byte) (Located, error) {
	l := Located{Count: -1}
	if len(b) == 0 {
		return l, fmt.Errorf("%w: empty", ErrBadReply)
	}
	if b[0] != '{' {
		l.Msgpack = true
		n, i, err := mapLen(b, 0)
		if err != nil {
			return l, err
		}
		for range n {
			kl, ks, err := strLen(b, i)
			if err != nil {
				return l, err
			}
			key, vs := string(b[ks:ks+kl]), ks+kl
			if contains(arrayKeys, key) {
				l.ArrayAt = vs
				l.Count, l.ItemsAt, err = arrayLen(b, vs)
				return l, err
			}
			ve, err := skipMsgpack(b, vs)
			if err != nil {
				return l, err
			}
			if contains(otherKeys, key) {
				l.Other = b[vs:ve]
			}
			i = ve
		}
		return l, fmt.Errorf("%w: no message array", ErrBadReply)
	}
	i := skipSpace(b, 1)
	for i < len(b) && b[i] == '"' {
		ke, err := skipJSON(b, i, 0)
		if err != nil {
			return l, err
		}
		key := string(b[i+1 : ke-1])
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			break
		}
		vs := skipSpace(b, i+1)
		if contains(arrayKeys, key) && vs < len(b) && b[vs] == '[' {
			l.ArrayAt, l.ItemsAt = vs, skipSpace(b, vs+1)
			return l, nil
		}
		ve, err := skipJSON(b, vs, 0)
		if err != nil {
			return l, err
		}
		if contains(otherKeys, key) {
			l.Other = b[vs:ve]
		}
		i = skipSpace(b, ve)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return l, fmt.Errorf("%w: no message array", ErrBadReply)
}

// SkipValue returns where the value at b[i] ends, JSON or msgpack.
func SkipValue(b []byte, i int, msgpack bool) (int, error) {
	if msgpack {
		return skipMsgpack(b, i)
	}
	return skipJSON(b, i, 0)
}
