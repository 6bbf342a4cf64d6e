package server

import (
	"fmt"
	"strconv"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// A rendered reply (a format other than neutral, or a budget asked for)
// is built on request from the session's messages. The service keeps the
// latest one of each session (renderCache: one per session whatever the
// format, all within RenderCacheBytes) until the session changes, so a
// session's memory grows by at most one reply whatever formats its
// clients ask for. A JSON reply in a provider format is kept with the
// render.State that renders the session's next reply in that format from
// where the session changed (appendJSON); appendRenderedJSON renders
// whole, the reference it equals. Its fields (PROTOCOL.md):
//
//	{"session", "seq", "format", <the body's fields>, "dropped", "render", "usage", "budget"}
//
// A neutral reply with a budget is the neutral reply with "usage" and
// "budget" after "dropped", and no "format" or "render".

// rendering is what a rendered reply says beside session and seq.
type rendering struct {
	format  render.Format
	body    render.Body
	report  render.Report
	dropped projection.Dropped
	msgs    []any
	seqs    []uint64
	req     contextRequest
}

func renderSession(p *projection.Session, req contextRequest, browser []string) rendering {
	r := rendering{format: req.format, req: req, msgs: []any{}}
	if p != nil {
		r.msgs, r.seqs, r.dropped = p.Messages(), p.MessageSeqs(nil), p.Dropped()
	} else {
		r.dropped = projection.Dropped{UnpairedCalls: []projection.UnpairedCall{}, OrphanResults: []projection.OrphanResult{}}
	}
	r.body, r.report = render.Render(r.format, r.msgs, render.Options{Seqs: r.seqs, BrowserTools: browser})
	return r
}

// tail returns the fields after the body: dropped, render (not for
// neutral), usage, budget (when asked for).
func (r rendering) tail(bodyJSONBytes int) []record.Member {
	u := render.Estimate(r.body, bodyJSONBytes)
	fields := []record.Member{{Key: "dropped", Value: r.dropped.Map()}}
	if r.format != render.Neutral {
		fields = append(fields, record.Member{Key: "render", Value: r.report.Map(r.format)})
	}
	fields = append(fields, record.Member{Key: "usage", Value: u.Map()})
	if r.req.hasBudget {
		b := render.CheckBudget(r.msgs, r.seqs, u, r.req.budget)
		fields = append(fields, record.Member{Key: "budget", Value: b.Map()})
	}
	return fields
}

// appendJSON appends the JSON reply of a request for a provider format,
// rendered from the state kept with the session's last rendered reply
// (render.RenderJSON: only what follows the latest checkpoint before the
// first message that changed is rendered again), and keeps the reply
// with its new state. The reply is appendRenderedJSON's, byte for byte.
// A neutral reply with a budget, or an unknown session, is rendered as
// appendRenderedJSON renders it, and kept by put.
func (c *renderCache) appendJSON(dst []byte, session string, p *projection.Session, req contextRequest, browser []string) ([]byte, *cachedReply, error) {
	if req.format == render.Neutral || p == nil {
		out, err := appendRenderedJSON(dst, session, p, req, browser)
		return out, nil, err
	}
	msgs, dropped := p.Messages(), p.Dropped()
	var head [256]byte
	h := append(head[:0], `{"session":`...)
	h = record.AppendJSONString(h, session)
	h = append(h, `,"seq":`...)
	h = strconv.AppendUint(h, p.Seq(), 10)
	h = append(h, `,"format":`...)
	h = record.AppendJSONString(h, string(req.format))
	h = append(h, ',')
	prev, buf, done := c.state(p, req, overIf(dst, len(h)))
	defer done()
	dst = c.start(dst, buf, prev)
	at := len(dst)
	dst = append(dst, h...)
	// The sequences of the messages the state before held are its own:
	// only the new ones are read, not the session's every message.
	dst, st, err := render.RenderJSON(dst, prev, req.format, msgs, render.Options{SeqsFrom: p.MessageSeqsFrom, BrowserTools: browser})
	if err != nil {
		return dst, nil, err
	}
	dst = append(dst, `,"dropped":`...)
	if dst, err = record.AppendJSON(dst, dropped.Map()); err != nil {
		return dst, nil, err
	}
	dst = append(dst, `,"render":`...)
	if dst, err = st.AppendReportJSON(dst); err != nil {
		return dst, nil, err
	}
	u := st.Usage()
	dst = append(dst, `,"usage":`...)
	dst, _ = record.AppendJSON(dst, u.Map())
	if req.hasBudget {
		dst = append(dst, `,"budget":`...)
		dst, _ = record.AppendJSON(dst, render.CheckBudget(msgs, st.Seqs(), u, req.budget).Map())
	}
	dst = append(dst, '}')
	if digestIn(req) && c.digest != nil {
		d, err := c.digest(dst[at:], session, p, req, st)
		if err != nil {
			return dst, nil, err
		}
		dst = appendJSONDigest(dst, d)
	}
	return dst, c.keep(p, req, dst, st), nil
}

// appendJSONDigest ends a whole JSON reply, up to its closing brace, with
// its digest.
func appendJSONDigest(dst []byte, digest string) []byte {
	dst = append(dst[:len(dst)-1], `,"digest":"`...)
	dst = append(dst, digest...)
	return append(dst, `"}`...)
}

// overIf is the head length to pass to state when the caller leaves the
// buffer to the cache (dst nil): the next reply may be written over the
// one before.
func overIf(dst []byte, head int) int {
	if dst != nil {
		return 0
	}
	return head
}

// start returns the buffer a reply is written in: dst when the caller
// gives one, else buf, the buffer of the state's reply to write over
// (state), else a buffer for a reply about as long as the state's.
func (c *renderCache) start(dst, buf []byte, prev *render.State) []byte {
	switch {
	case dst != nil:
		return dst
	case buf != nil:
		return buf
	case prev != nil:
		return c.buffer(prev.BodyAt() + len(prev.Body()))
	}
	return c.buffer(0)
}

// appendMsgpack is appendJSON for a msgpack reply: the reply of a
// request for a provider format, rendered from the state kept with the
// session's last msgpack reply in that format (render.RenderMsgpack), and
// kept with its new state. The reply is appendRenderedMsgpack's, byte for
// byte.
func (c *renderCache) appendMsgpack(dst []byte, session string, p *projection.Session, req contextRequest, browser []string) ([]byte, *cachedReply, error) {
	if req.format == render.Neutral || p == nil {
		out, err := appendRenderedMsgpack(dst, session, p, req, browser)
		return out, nil, err
	}
	msgs, dropped := p.Messages(), p.Dropped()
	// The map's size depends on the body's members: it is written once
	// they are, in the room left for its longest header (a map of at
	// most 16 entries: one byte).
	var head [256]byte
	h := append(head[:0], 0)
	h = record.AppendMsgpackString(h, "session")
	h = record.AppendMsgpackString(h, session)
	h = record.AppendMsgpackString(h, "seq")
	h = appendMsgpackUint(h, p.Seq())
	h = record.AppendMsgpackString(h, "format")
	h = record.AppendMsgpackString(h, string(req.format))
	prev, buf, done := c.state(p, req, overIf(dst, len(h)))
	defer done()
	dst = c.start(dst, buf, prev)
	at := len(dst)
	dst = append(dst, h...)
	// The sequences of the messages the state before held are its own:
	// only the new ones are read, not the session's every message.
	dst, st, err := render.RenderMsgpack(dst, prev, req.format, msgs, render.Options{SeqsFrom: p.MessageSeqsFrom, BrowserTools: browser})
	if err != nil {
		return dst, nil, fmt.Errorf("%w: %w", errNotMsgpack, err)
	}
	n := 3 + st.Fields() + 3 // session, seq, format; the body; dropped, render, usage
	if req.hasBudget {
		n++
	}
	dst[at] = record.AppendMsgpackMapLen(nil, n)[0]
	dst = record.AppendMsgpackString(dst, "dropped")
	if dst, err = record.AppendMsgpack(dst, dropped.Map()); err != nil {
		return dst, nil, fmt.Errorf("%w: %w", errNotMsgpack, err)
	}
	dst = record.AppendMsgpackString(dst, "render")
	if dst, err = st.AppendReportMsgpack(dst); err != nil {
		return dst, nil, fmt.Errorf("%w: %w", errNotMsgpack, err)
	}
	u := st.Usage()
	dst = record.AppendMsgpackString(dst, "usage")
	dst, _ = record.AppendMsgpack(dst, u.Map())
	if req.hasBudget {
		dst = record.AppendMsgpackString(dst, "budget")
		dst, _ = record.AppendMsgpack(dst, render.CheckBudget(msgs, st.Seqs(), u, req.budget).Map())
	}
	if digestIn(req) && c.digest != nil {
		d, err := c.digest(dst[at:], session, p, req, st)
		if err != nil {
			return dst, nil, err
		}
		dst[at] = record.AppendMsgpackMapLen(nil, n+1)[0]
		dst = record.AppendMsgpackString(dst, "digest")
		dst = record.AppendMsgpackString(dst, d)
	}
	return dst, c.keep(p, req, dst, st), nil
}

// appendRenderedJSON appends a rendered reply as JSON.
func appendRenderedJSON(dst []byte, session string, p *projection.Session, req contextRequest, browser []string) ([]byte, error) {
	r := renderSession(p, req, browser)
	var seq uint64
	if p != nil {
		seq = p.Seq()
	}
	dst = append(dst, `{"session":`...)
	dst = record.AppendJSONString(dst, session)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	if r.format != render.Neutral {
		dst = append(dst, `,"format":`...)
		dst = record.AppendJSONString(dst, string(r.format))
	}
	// The body's fields, whose JSON object is as long as they are plus
	// its braces less the first comma.
	start := len(dst)
	var err error
	if r.format == render.Neutral && p != nil {
		body, _ := p.JSONBody() // the cached encoding of the messages
		dst = grow(dst, len(body)+4096)
		dst = append(dst, `,"messages":[`...)
		dst = append(dst, body...)
		dst = append(dst, ']')
	} else {
		for _, m := range r.body.Fields.Members {
			dst = append(dst, ',')
			dst = record.AppendJSONString(dst, m.Key)
			dst = append(dst, ':')
			if dst, err = record.AppendJSON(dst, m.Value); err != nil {
				return dst, fmt.Errorf("encode %s body: %w", r.format, err)
			}
		}
	}
	for _, m := range r.tail(len(dst) - start + 1) {
		dst = append(dst, ',')
		dst = record.AppendJSONString(dst, m.Key)
		dst = append(dst, ':')
		if dst, err = record.AppendJSON(dst, m.Value); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// appendRenderedMsgpack appends a rendered reply as a msgpack map. Usage
// still counts the body's JSON bytes, what a provider is sent, measured
// without encoding them.
func appendRenderedMsgpack(dst []byte, session string, p *projection.Session, req contextRequest, browser []string) ([]byte, error) {
	r := renderSession(p, req, browser)
	var seq uint64
	if p != nil {
		seq = p.Seq()
	}
	jsonBytes := 0
	if r.format == render.Neutral && p != nil {
		body, _ := p.JSONBody()
		jsonBytes = len(`{"messages":[]}`) + len(body)
	} else {
		var err error
		if jsonBytes, err = r.body.JSONLen(); err != nil {
			return dst, fmt.Errorf("encode %s body: %w", r.format, err)
		}
		dst = grow(dst, jsonBytes+4096) // msgpack is at most about as long
	}
	tail := r.tail(jsonBytes)
	n := 2 + r.body.Fields.Len() + len(tail)
	if r.format != render.Neutral {
		n++
	}
	dst = record.AppendMsgpackMapLen(dst, n)
	dst = record.AppendMsgpackString(dst, "session")
	dst = record.AppendMsgpackString(dst, session)
	dst = record.AppendMsgpackString(dst, "seq")
	dst = appendMsgpackUint(dst, seq)
	if r.format != render.Neutral {
		dst = record.AppendMsgpackString(dst, "format")
		dst = record.AppendMsgpackString(dst, string(r.format))
	}
	fields := r.body.Fields.Members
	if r.format == render.Neutral && p != nil {
		body, n, err := p.MsgpackBody() // the cached encoding of the messages
		if err != nil {
			return dst, fmt.Errorf("%w: %w", errNotMsgpack, err)
		}
		dst = grow(dst, len(body)+4096)
		dst = record.AppendMsgpackString(dst, "messages")
		dst = record.AppendMsgpackArrayLen(dst, n)
		dst = append(dst, body...)
		fields = nil
	}
	var err error
	for _, fs := range [][]record.Member{fields, tail} {
		for _, m := range fs {
			dst = record.AppendMsgpackString(dst, m.Key)
			if dst, err = record.AppendMsgpack(dst, m.Value); err != nil {
				return dst, fmt.Errorf("%w: %w", errNotMsgpack, err)
			}
		}
	}
	return dst, nil
}

// sizeHint is the buffer a rendered reply starts in: the size of the one
// kept before for the session (prev), which a session that grows by a
// turn at a time stays close to, so that one allocation does instead of a
// doubling series. Without one the encoders grow it by what they measure
// of the body, or append doubles it.
func sizeHint(prev int) int {
	if prev == 0 {
		return 4096
	}
	return prev + prev/8 + 4096
}
