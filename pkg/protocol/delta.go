package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
