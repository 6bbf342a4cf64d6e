package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

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
