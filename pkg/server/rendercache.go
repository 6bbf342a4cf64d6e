package server

import (
	"bytes"
	"slices"
	"sync"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/render"
)

// DefaultRenderCacheBytes is the largest rendered reply, with its state,
// kept with a session.
const DefaultRenderCacheBytes = 16 << 20

// keptPerSession is how many rendered replies a session keeps: its
// latest two, of different formats or encodings, so that a session
// asked for two formats in turn renders each from the one before.
const keptPerSession = 2

// renderCache keeps the latest rendered replies of each session with the
// session's projection (projection.Session.Keep): a session fetched again
// unchanged is answered as fast as the neutral reply, which the session
// itself keeps, and a reply in a provider format is kept with the
// render.State that renders the session's next one in that format from
// where it changed (appendJSON, appendMsgpack). They are counted in the
// projections' memory bound (the store's --cache-bytes) and go with the
// projection when it is evicted: one bound for all a session holds. An
// entry counts for the reply and the state, the state's body being the
// reply's bytes; one larger than max is not kept.
//
// A reply is kept for the projection's version and seq, and everything in
// the request that changes the reply. The caller holds the session's
// lock; mu guards what is read without it, whether an entry's buffer may
// serve another reply.
type renderCache struct {
	max int // the largest entry kept; 0 keeps none
	mu  sync.Mutex
	// digest returns the digest of reply, a whole reply in a provider
	// format rendered with st, indexing its array (Service.indexReply);
	// nil: replies are made without.
	digest func(reply []byte, session string, p *projection.Session, req contextRequest, st *render.State) (string, error)
}

type cachedReply struct {
	version uint64
	seq     uint64
	key     replyKey
	reply   []byte
	// state renders the session's next reply in the same format and
	// encoding from this one (render.RenderJSON, RenderMsgpack); its
	// body is part of reply. nil for other replies.
	state *render.State
	size  int // what the entry counts for: the reply and the state

	// The reply's buffer is reused for another reply (see buffer) once
	// nothing can read it: the entry is no longer kept (gone), the
	// request that made it has sent it (sent), no rendering reads its
	// state (users), and it was never handed to another request
	// (handedOut: whose sending is not followed). Guarded by the
	// cache's mu.
	buf       []byte // the reply's buffer, whole; nil: not to be reused
	sent      bool
	users     int
	handedOut bool
	gone      bool
	// taken is set when the session's next reply is written over this
	// one's buffer (state): the entry is never served again.
	taken bool
}

// replyKey is what of a request changes a rendered reply.
type replyKey struct {
	format    string
	msgpack   bool
	budget    uint64
	hasBudget bool
	// digest: a reply in a provider format that ends with its digest
	// (digestIn).
	digest bool
}

func keyOf(req contextRequest) replyKey {
	return replyKey{string(req.format), req.msgpack, req.budget, req.hasBudget, digestIn(req)}
}

// digestIn reports whether a rendered reply for req, of a known session,
// is made with its digest (appendJSON, appendMsgpack): one in a provider
// format, unedited, whose request does not say "digest": false.
func digestIn(req contextRequest) bool {
	return req.digest && req.format != render.Neutral && req.edits == nil
}

// kept returns the replies the projection keeps, the latest first.
func kept(p *projection.Session) []*cachedReply {
	rs, _ := p.Kept().([]*cachedReply)
	return rs
}

// get returns the reply kept for the projection as it is now, or nil and
// the size of the reply kept for it before in the same format and
// encoding, or else of any (0 when none), which the next one is likely
// close to.
func (c *renderCache) get(p *projection.Session, req contextRequest) (reply []byte, prev int) {
	if p == nil {
		return nil, 0
	}
	key := keyOf(req)
	for _, r := range kept(p) {
		if r.taken {
			continue
		}
		if r.key == key && r.version == p.Version() && r.seq == p.Seq() {
			c.mu.Lock()
			r.handedOut = true
			c.mu.Unlock()
			return r.reply, len(r.reply)
		}
		if prev == 0 || r.key.format == key.format && r.key.msgpack == key.msgpack {
			prev = len(r.reply)
		}
	}
	return nil, prev
}

// put keeps reply, which is never written again, for the projection. A
// reply whose buffer is much larger than itself is kept as a copy: what
// is kept holds the memory it is counted for.
func (c *renderCache) put(p *projection.Session, req contextRequest, reply []byte) *cachedReply {
	return c.keep(p, req, reply, nil)
}

// keep keeps reply and, unless nil, the state that renders the next
// reply from it, whose body and report bytes lie in reply, with the
// projection, in place of the one kept for the same format and encoding
// or else of the least recently made. The entry counts for the reply and
// the state's own memory; one larger than max is not kept. It returns
// the entry, or nil when reply was not kept as it is.
func (c *renderCache) keep(p *projection.Session, req contextRequest, reply []byte, st *render.State) *cachedReply {
	if p == nil || c.max <= 0 || len(reply) == 0 {
		return nil
	}
	buf := reply
	size := len(reply)
	if st != nil {
		size += st.Size()
	}
	if size > c.max {
		return nil
	}
	rs := kept(p)
	key := keyOf(req)
	for _, r := range rs {
		// The reply of the request at the projection's version and seq
		// is kept already (a reply is the same bytes whoever made it).
		// Nothing is held of a copied reply's first buffer, not even a
		// pointer to compare: it would keep the whole buffer.
		if r.key == key && r.version == p.Version() && r.seq == p.Seq() && !r.taken {
			return nil
		}
	}
	if cap(reply)-len(reply) > len(reply)/4 {
		reply = bytes.Clone(reply)
		buf = nil // the request's own, not reused
	}
	reply = reply[:len(reply):len(reply)]
	if st != nil {
		st = st.In(reply)
	}
	r := &cachedReply{version: p.Version(), seq: p.Seq(), key: key,
		reply: reply, state: st, size: size, buf: buf}
	// The one it replaces: the same format and encoding, or the oldest.
	out := -1
	for i, o := range rs {
		if o.key.format == r.key.format && o.key.msgpack == r.key.msgpack {
			out = i
			break
		}
	}
	if out < 0 && len(rs) >= keptPerSession {
		out = len(rs) - 1
	}
	next := make([]*cachedReply, 0, keptPerSession)
	next = append(next, r)
	total := int64(size)
	for i, o := range rs {
		if i != out {
			next = append(next, o)
			total += int64(o.size)
		}
	}
	p.Keep(next, total)
	if out >= 0 {
		c.mu.Lock()
		rs[out].gone = true
		c.release(rs[out])
		c.mu.Unlock()
	}
	return r
}

// state returns the rendering state kept with the projection for the
// request's format and encoding, or nil, and the func to call once the
// state is no longer read. With over, the next reply's head being that
// long, it also returns the buffer of the state's reply when nothing else
// can read it (see release): the next reply is written over it, from
// where the state's body starts, and the entry is never served again.
// done then drops the entry unless the next reply replaced it.
func (c *renderCache) state(p *projection.Session, req contextRequest, over int) (st *render.State, buf []byte, done func()) {
	for _, r := range kept(p) {
		if r.taken || r.state == nil || r.key.format != string(req.format) || r.key.msgpack != req.msgpack {
			continue
		}
		c.mu.Lock()
		if over > 0 && r.sent && !r.handedOut && r.users == 0 && r.buf != nil && r.state.BodyAt() == over {
			buf, r.buf, r.taken = r.buf[:0], nil, true
		}
		r.users++
		c.mu.Unlock()
		return r.state, buf, func() {
			if r.taken {
				c.forget(p, r)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			r.users--
			c.release(r)
		}
	}
	return nil, nil, func() {}
}

// forget drops r from what the projection keeps, if it is there.
func (c *renderCache) forget(p *projection.Session, r *cachedReply) {
	rs := kept(p)
	i := slices.Index(rs, r)
	if i < 0 {
		return
	}
	next := slices.Delete(slices.Clone(rs), i, i+1)
	if len(next) == 0 {
		p.Keep(nil, 0)
	} else {
		p.Keep(next, p.KeptBytes()-int64(r.size))
	}
	c.mu.Lock()
	r.gone = true
	c.release(r)
	c.mu.Unlock()
}

// renderBuffers hold the buffers of rendered replies no longer kept: a
// session's next reply is about as large as its last, and a new buffer
// for every reply would be zeroed, and collected, each time.
var renderBuffers sync.Pool

// buffer returns an empty buffer for a reply likely close to prev bytes
// (0: unknown): a buffer of a reply no longer kept when one fits it,
// room for a turn's growth included, and is not so large that keep
// would copy the reply out of it; else a new one of sizeHint(prev).
func (c *renderCache) buffer(prev int) []byte {
	want := sizeHint(prev)
	if b, _ := renderBuffers.Get().(*[]byte); b != nil && prev > 0 && cap(*b) >= prev+prev/16+4096 && cap(*b) <= want+want/4 {
		return (*b)[:0]
	}
	return make([]byte, 0, want)
}

// release hands r's buffer to the next reply once nothing reads it. The
// caller holds c.mu.
func (c *renderCache) release(r *cachedReply) {
	if !r.gone || !r.sent || r.users > 0 || r.handedOut || r.buf == nil {
		return
	}
	buf := r.buf[:0]
	r.buf, r.reply, r.state = nil, nil, nil
	renderBuffers.Put(&buf)
}

// sent says that the request that made r's reply has sent it: its bytes
// are copied to the connection. r may be nil.
func (c *renderCache) sent(r *cachedReply) {
	if r == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r.sent = true
	c.release(r)
}
