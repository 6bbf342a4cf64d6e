package server

import (
	"fmt"
	"strconv"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// appendReplyJSON appends a context reply of protocol 3.4, the one asked
// with "digest": false:
// {"session":S,"seq":N,"messages":[...],"dropped":{...}}. The reply that
// carries its digest, the one most requests get, is made by
// digestedNeutral from the same encoded messages.
func appendReplyJSON(dst []byte, session string, p *projection.Session) []byte {
	if p == nil {
		return appendReplyJSONTail(appendReplyJSONHead(dst, session, 0), projection.Dropped{})
	}
	body, _ := p.JSONBody()
	dst = appendReplyJSONHead(grow(dst, len(body)+len(session)+256), session, p.Seq())
	return appendReplyJSONTail(append(dst, body...), p.Dropped())
}

// appendReplyJSONHead appends the reply up to the first message.
func appendReplyJSONHead(dst []byte, session string, seq uint64) []byte {
	dst = append(dst, `{"session":`...)
	dst = record.AppendJSONString(dst, session)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	return append(dst, `,"messages":[`...)
}

// appendReplyJSONTail appends the reply after the last message.
func appendReplyJSONTail(dst []byte, d projection.Dropped) []byte {
	dst = append(dst, `],"dropped":`...)
	dst = appendDroppedJSON(dst, d)
	return append(dst, '}')
}

func appendDroppedJSON(dst []byte, d projection.Dropped) []byte {
	dst = append(dst, `{"unpaired_calls":[`...)
	for i, c := range d.UnpairedCalls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = record.AppendJSONString(dst, c.ID)
		dst = append(dst, `,"tool":`...)
		dst = record.AppendJSONString(dst, c.Tool)
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, c.Seq, 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"orphan_results":[`...)
	for i, r := range d.OrphanResults {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = record.AppendJSONString(dst, r.ID)
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, r.Seq, 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"images_omitted":`...)
	dst = strconv.AppendInt(dst, int64(d.ImagesOmitted), 10)
	return append(dst, '}')
}

// appendReplyMsgpack encodes the same reply as a msgpack map. A context
// holding a number msgpack cannot carry has no msgpack form: errNotMsgpack.
func appendReplyMsgpack(dst []byte, session string, p *projection.Session) ([]byte, error) {
	var body []byte
	var n int
	if p != nil {
		var err error
		if body, n, err = p.MsgpackBody(); err != nil {
			return dst, fmt.Errorf("%w: %w", errNotMsgpack, err)
		}
	}
	dst = grow(dst, len(body)+len(session)+512)
	dst = record.AppendMsgpackMapLen(dst, 4)
	dst = record.AppendMsgpackString(dst, "session")
	dst = record.AppendMsgpackString(dst, session)
	dst = record.AppendMsgpackString(dst, "seq")
	var d projection.Dropped
	if p == nil {
		dst = record.AppendMsgpackInt(dst, 0)
		dst = record.AppendMsgpackString(dst, "messages")
		dst = record.AppendMsgpackArrayLen(dst, 0)
	} else {
		dst = appendMsgpackUint(dst, p.Seq())
		dst = record.AppendMsgpackString(dst, "messages")
		dst = record.AppendMsgpackArrayLen(dst, n)
		dst = append(dst, body...)
		d = p.Dropped()
	}
	dst = record.AppendMsgpackString(dst, "dropped")
	dst = record.AppendMsgpackMapLen(dst, 3)
	dst = record.AppendMsgpackString(dst, "unpaired_calls")
	dst = record.AppendMsgpackArrayLen(dst, len(d.UnpairedCalls))
	for _, c := range d.UnpairedCalls {
		dst = record.AppendMsgpackMapLen(dst, 3)
		dst = record.AppendMsgpackString(dst, "id")
		dst = record.AppendMsgpackString(dst, c.ID)
		dst = record.AppendMsgpackString(dst, "tool")
		dst = record.AppendMsgpackString(dst, c.Tool)
		dst = record.AppendMsgpackString(dst, "seq")
		dst = appendMsgpackUint(dst, c.Seq)
	}
	dst = record.AppendMsgpackString(dst, "orphan_results")
	dst = record.AppendMsgpackArrayLen(dst, len(d.OrphanResults))
	for _, r := range d.OrphanResults {
		dst = record.AppendMsgpackMapLen(dst, 2)
		dst = record.AppendMsgpackString(dst, "id")
		dst = record.AppendMsgpackString(dst, r.ID)
		dst = record.AppendMsgpackString(dst, "seq")
		dst = appendMsgpackUint(dst, r.Seq)
	}
	dst = record.AppendMsgpackString(dst, "images_omitted")
	return record.AppendMsgpackInt(dst, int64(d.ImagesOmitted)), nil
}

func appendMsgpackUint(dst []byte, n uint64) []byte {
	v, _ := record.AppendMsgpack(dst, n)
	return v
}

// grow makes room for n more bytes in one allocation, with an eighth
// more: a buffer from replyBuffers holds a session's reply, which grows a
// little every turn, and a buffer of its exact size would be allocated
// (and zeroed) anew each time.
func grow(dst []byte, n int) []byte {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	return append(make([]byte, 0, len(dst)+n+n/8), dst...)
}
