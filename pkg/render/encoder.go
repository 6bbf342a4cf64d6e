package render

import (
	"bytes"
	"fmt"

	"github.com/ctxd/ctxd/pkg/record"
)

// encoder writes the body's members, completing the marks with the
// offsets and image counts they were taken at.
type encoder struct {
	pv    *provider
	st    *State
	marks []checkpoint
	next  int // the first mark not yet reached

	// A msgpack encoding (encodeMsgpack) tracks the length of the JSON it
	// stands for in jlen, and where in dst its items, its last message
	// (-1 for none, or a format that does not merge) and that message's
	// blocks begin. prevOpen holds the blocks of the open message of the
	// checkpoint resumed from, written after its new header.
	start, items, openAt, blocksAt int
	jlen                           int
	over                           bool // dst is the buffer of the state rendered from
	prevOpen                       []byte
	resumeOpen                     bool
	openMore                       int // blocks merged into the open message since
	openRole                       string

	outs, nblk                      int
	images, imageBytes, imageTokens int
}

func (e *encoder) head(dst []byte, system any) ([]byte, error) {
	if system != nil {
		dst = record.AppendJSONString(dst, e.pv.system)
		dst = append(dst, ':')
		var err error
		if dst, err = record.AppendJSON(dst, system); err != nil {
			return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
		}
		e.walk(system)
		dst = append(dst, ',')
	}
	dst = record.AppendJSONString(dst, e.pv.messages)
	return append(dst, ":["...), nil
}

func (e *encoder) walk(v any) {
	walkImages(v, func(img image, n int) {
		e.images++
		e.imageBytes += n
		w, h, ok := imageSize(img)
		if !ok {
			w, h = defaultSide, defaultSide
		}
		e.imageTokens += e.pv.imageTokens(w, h)
	})
}

// reached completes the marks taken where the encoding is now.
func (e *encoder) reached(off int) {
	for e.next < len(e.marks) && e.marks[e.next].outs == e.outs && e.marks[e.next].nblk == e.nblk {
		m := &e.marks[e.next]
		m.off, m.images, m.imageBytes, m.imageTokens = off, e.images, e.imageBytes, e.imageTokens
		e.next++
	}
}

// reachedMsgpack completes the marks taken where a msgpack encoding is
// now, at the end of dst.
func (e *encoder) reachedMsgpack(dst []byte) {
	for e.next < len(e.marks) && e.marks[e.next].outs == e.outs && e.marks[e.next].nblk == e.nblk {
		m := &e.marks[e.next]
		m.off, m.images, m.imageBytes, m.imageTokens = e.jlen, e.images, e.imageBytes, e.imageTokens
		if e.openAt >= 0 {
			m.mopen, m.mlen = e.openAt-e.items, len(dst)-e.blocksAt
		} else {
			m.mopen, m.mlen = -1, len(dst)-e.items
		}
		e.next++
	}
}

// jsonLen is record.JSONLen.
func jsonLen(v any) (int, error) {
	n, err := record.JSONLen(v)
	if err != nil {
		return 0, fmt.Errorf("encode body: %w", err)
	}
	return n, nil
}

// headMsgpack writes the members before the messages' items, msgpack,
// and the header of an array of n messages.
func (e *encoder) headMsgpack(dst []byte, system any, n int) ([]byte, error) {
	key, sysKey := e.pv.messages, e.pv.system
	e.st.fields = 1
	if system != nil {
		e.st.fields = 2
		dst = record.AppendMsgpackString(dst, sysKey)
		var err error
		if dst, err = record.AppendMsgpack(dst, system); err != nil {
			return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
		}
		k, err := jsonLen(system)
		if err != nil {
			return dst, err
		}
		e.jlen += len(sysKey) + 3 + k + 1 // "key":value,
		e.walk(system)
	}
	dst = record.AppendMsgpackString(dst, key)
	e.jlen += len(key) + 2 + 2 // "key":[
	e.st.arrAt = len(dst) - e.start
	dst = record.AppendMsgpackArrayLen(dst, n)
	e.st.itemsAt = len(dst) - e.start
	e.items = len(dst)
	return dst, nil
}

// resume writes the members of prev's msgpack body up to the checkpoint
// from, with its messages array header made for n messages. The open
// message's blocks are kept in prevOpen, for messagesMsgpack to write
// after its new header.
func (e *encoder) resume(dst []byte, prev *State, from *checkpoint, n int) []byte {
	body := prev.body
	items := body[prev.itemsAt:]
	var blocks int
	if from.mopen >= 0 {
		blocks = from.mopen + msgHeaderLen(items[from.mopen:], from.role, e.pv.blocks)
	}
	if e.over {
		// Written over in place, the kept bytes stay where they are
		// unless a header before them changes its length: then they
		// are copied out first.
		var buf [64]byte
		same := len(record.AppendMsgpackArrayLen(buf[:0], n)) == prev.itemsAt-prev.arrAt
		if same && from.mopen >= 0 {
			same = len(appendMsgHeader(buf[:0], from.role, e.pv.blocks, e.nblk+e.openMore)) == blocks-from.mopen
		}
		if !same {
			body = bytes.Clone(body)
			items = body[prev.itemsAt:]
		}
	}
	e.st.arrAt = prev.arrAt
	dst = appendKept(dst, body[:prev.arrAt])
	dst = record.AppendMsgpackArrayLen(dst, n)
	e.st.itemsAt = len(dst) - e.start
	e.items = len(dst)
	e.jlen = from.off
	if from.mopen < 0 {
		return appendKept(dst, items[:from.mlen])
	}
	dst = appendKept(dst, items[:from.mopen])
	e.prevOpen, e.resumeOpen, e.openRole = items[blocks:blocks+from.mlen], true, from.role
	return dst
}

// appendMsgHeader appends the head of a merged message of n blocks:
// {"role": role, key: [ in msgpack.
func appendMsgHeader(dst []byte, role, key string, n int) []byte {
	dst = record.AppendMsgpackMapLen(dst, 2)
	dst = record.AppendMsgpackString(dst, "role")
	dst = record.AppendMsgpackString(dst, role)
	dst = record.AppendMsgpackString(dst, key)
	return record.AppendMsgpackArrayLen(dst, n)
}

// msgHeaderLen returns the length of the head appendMsgHeader wrote at
// the start of b.
func msgHeaderLen(b []byte, role, key string) int {
	var buf [64]byte
	n := len(appendMsgHeader(buf[:0], role, key, 0)) - 1 // less the array header
	switch b[n] {
	case 0xdc:
		return n + 3
	case 0xdd:
		return n + 5
	}
	return n + 1
}

// messagesMsgpack is messages for a msgpack encoding: it writes the
// list's items after the body so far, the last message of a merging
// format's checkpoint (prevOpen) with its new header, and tracks the
// JSON length of what it writes.
func (e *encoder) messagesMsgpack(dst []byte, l *outList) ([]byte, error) {
	key := e.pv.blocks
	open := e.outs > 0 && e.pv.blocks != ""
	if e.resumeOpen {
		// The checkpoint's last message, with the blocks merged into it
		// since.
		n := e.nblk + e.openMore
		e.openAt = len(dst)
		dst = appendMsgHeader(dst, e.openRole, key, n)
		e.blocksAt = len(dst)
		dst = appendKept(dst, e.prevOpen)
		e.prevOpen = nil
	}
	e.reachedMsgpack(dst)
	var err error
	for _, o := range l.msgs {
		if o.flat {
			if e.outs > 0 {
				e.jlen++
			}
			if dst, err = record.AppendMsgpack(dst, o.blocks[0]); err != nil {
				return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
			}
			k, err := jsonLen(o.blocks[0])
			if err != nil {
				return dst, err
			}
			e.jlen += k
			e.walk(o.blocks[0])
			e.outs++
			e.reachedMsgpack(dst)
			continue
		}
		if o.cont == 0 {
			// A new message; the one before is closed.
			e.openAt = len(dst)
			dst = appendMsgHeader(dst, o.role, key, len(o.blocks))
			e.blocksAt = len(dst)
			if open {
				e.jlen += 2 // ]}
			}
			if e.outs > 0 {
				e.jlen++
			}
			r, err := jsonLen(o.role)
			if err != nil {
				return dst, err
			}
			e.jlen += len(`{"role":`) + r + 1 + len(key) + 2 + 2 // {"role":R,"key":[
			e.opened()
			open = true
		}
		for _, b := range o.blocks {
			if e.nblk > 0 {
				e.jlen++
			}
			if dst, err = record.AppendMsgpack(dst, b); err != nil {
				return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
			}
			k, err := jsonLen(b)
			if err != nil {
				return dst, err
			}
			e.jlen += k
			e.walk(b)
			if e.pv.breakpoint {
				if isThinking(b) {
					e.st.thinking = append(e.st.thinking, [2]int32{int32(e.outs - 1), int32(e.nblk)})
				}
			}
			e.nblk++
			e.reachedMsgpack(dst)
		}
	}
	if open {
		e.jlen += 2
	}
	if e.next != len(e.marks) {
		panic(fmt.Sprintf("render: %d checkpoints not reached", len(e.marks)-e.next))
	}
	e.jlen++ // ]
	return dst, nil
}

// messages writes the list's messages after the body so far (dst[start:]
// holds the members up to the checkpoint, its last message open), and
// closes the body.
func (e *encoder) messages(dst []byte, start int, l *outList) ([]byte, error) {
	key := e.pv.blocks
	open := e.outs > 0 && e.pv.blocks != ""
	e.reached(len(dst) - start)
	var err error
	for _, o := range l.msgs {
		if o.flat {
			if e.outs > 0 {
				dst = append(dst, ',')
			}
			if dst, err = record.AppendJSON(dst, o.blocks[0]); err != nil {
				return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
			}
			e.walk(o.blocks[0])
			e.outs++
			e.reached(len(dst) - start)
			continue
		}
		if o.cont == 0 {
			// A new message; the one before is closed.
			if open {
				dst = append(dst, "]}"...)
			}
			if e.outs > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"role":`...)
			dst = record.AppendJSONString(dst, o.role)
			dst = append(dst, ',')
			dst = record.AppendJSONString(dst, key)
			dst = append(dst, ":["...)
			e.opened()
			open = true
		}
		for _, b := range o.blocks {
			if e.nblk > 0 {
				dst = append(dst, ',')
			}
			if dst, err = record.AppendJSON(dst, b); err != nil {
				return dst, fmt.Errorf("encode %s body: %w", e.pv.format, err)
			}
			e.walk(b)
			if e.pv.breakpoint {
				if isThinking(b) {
					e.st.thinking = append(e.st.thinking, [2]int32{int32(e.outs - 1), int32(e.nblk)})
				}
			}
			e.nblk++
			e.reached(len(dst) - start)
		}
	}
	if open {
		dst = append(dst, "]}"...)
	}
	if e.next != len(e.marks) {
		panic(fmt.Sprintf("render: %d checkpoints not reached", len(e.marks)-e.next))
	}
	return append(dst, ']'), nil
}

// opened counts a body message opened; the one before is closed, and
// Anthropic's breakpoints need its count of blocks.
func (e *encoder) opened() {
	if e.pv.breakpoint && e.outs > 0 {
		e.st.nblk = append(e.st.nblk, int32(e.nblk)) // closed
	}
	e.outs++
	e.nblk = 0
}
