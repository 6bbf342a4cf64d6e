package server

import (
	"bytes"
	"container/list"
	"sync"
	"weak"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/render"
)

// DefaultRenderCacheBytes bounds the rendered replies a Service keeps.
const DefaultRenderCacheBytes = 64 << 20

// renderCache keeps the latest rendered reply of each session, so that a
// session fetched again unchanged is answered as fast as the neutral reply,
// which the session itself keeps. One reply per session, whatever format
// it was rendered in: a session's memory grows by at most one reply, and
// all the replies kept together by at most max bytes, the least recently
// used going first. A JSON reply in a provider format is kept with the
// render.State that renders the session's next one in that format from
// where it changed (appendJSON); the entry counts for both, the state's
// body being the reply's bytes.
//
// A reply is keyed by the session's projection (held weakly: an evicted
// projection is not kept alive), its version and seq, and everything in
// the request that changes the reply.
type renderCache struct {
	mu    sync.Mutex
	max   int
	bytes int
	byID  map[string]*list.Element // of *cachedReply
	lru   list.List                // front: most recently used
}

type cachedReply struct {
	session string
	proj    weak.Pointer[projection.Session]
	version uint64
	seq     uint64
	key     replyKey
	reply   []byte
	// state renders the session's next JSON reply in the same format
	// from this one (render.RenderJSON); its body is part of reply. nil
	// for other replies.
	state *render.State
	// origin is the first byte of the reply as it was made, before any
	// copy: put of a reply already kept does nothing.
	origin *byte
	size   int // what the entry counts for: the reply and the state

	// The reply's buffer is reused for another reply (see buffer) once
	// nothing can read it: the entry is gone from the cache, the request
	// that made it has sent it (sent), no rendering reads its state
	// (users), and it was never handed to another request (handedOut:
	// whose sending is not followed).
	buf       []byte // the reply's buffer, whole
	sent      bool
	users     int
	handedOut bool
	gone      bool
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

// sent says that the request that made reply, kept for the session, has
// sent it: its bytes are copied to the connection.
func (c *renderCache) sent(session string, reply []byte) {
	if len(reply) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.byID[session]; el != nil {
		if r := el.Value.(*cachedReply); r.origin == &reply[0] && &r.reply[0] == &reply[0] {
			r.sent = true
		}
	}
}

// replyKey is what of a request changes a rendered reply.
type replyKey struct {
	format    string
	msgpack   bool
	budget    uint64
	hasBudget bool
}

func keyOf(req contextRequest) replyKey {
	return replyKey{string(req.format), req.msgpack, req.budget, req.hasBudget}
}

// get returns the reply kept for the session's projection as it is now,
// or nil and the size of the reply kept for the session before (0 when
// none), which the next one is likely close to. The caller holds the
// session's lock.
func (c *renderCache) get(session string, p *projection.Session, req contextRequest) (reply []byte, prev int) {
	if p == nil {
		return nil, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.byID[session]
	if el == nil {
		return nil, 0
	}
	r := el.Value.(*cachedReply)
	if r.proj.Value() != p || r.version != p.Version() || r.seq != p.Seq() || r.key != keyOf(req) {
		return nil, len(r.reply)
	}
	c.lru.MoveToFront(el)
	r.handedOut = true
	return r.reply, len(r.reply)
}

// put keeps reply, which is never written again, for the session. A
// reply whose buffer is much larger than itself is kept as a copy: what
// is kept holds the memory it is counted for.
func (c *renderCache) put(session string, p *projection.Session, req contextRequest, reply []byte) {
	c.keep(session, p, req, reply, nil)
}

// keep keeps reply and, unless nil, the state that renders the next
// reply from it, whose body and report bytes lie in reply. The entry counts
// for the reply and the state's own memory; one larger than a quarter of
// the bound is not kept.
func (c *renderCache) keep(session string, p *projection.Session, req contextRequest, reply []byte, st *render.State) {
	if p == nil || c.max <= 0 || len(reply) == 0 {
		return
	}
	origin := &reply[0]
	buf := reply
	size := len(reply)
	if st != nil {
		size += st.Size()
	}
	if size > c.max/4 {
		return
	}
	if cap(reply)-len(reply) > len(reply)/4 {
		reply = bytes.Clone(reply)
		buf = nil // the request's own, not reused
	}
	reply = reply[:len(reply):len(reply)]
	if st != nil {
		st = st.In(reply)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]*list.Element{}
	}
	if el := c.byID[session]; el != nil {
		if r := el.Value.(*cachedReply); r.origin == origin && len(r.reply) == len(reply) {
			return // kept already
		}
		c.remove(el)
	}
	r := &cachedReply{session: session, proj: weak.Make(p), version: p.Version(), seq: p.Seq(), key: keyOf(req),
		reply: reply, state: st, origin: origin, size: size, buf: buf}
	c.byID[session] = c.lru.PushFront(r)
	c.bytes += size
	for c.bytes > c.max {
		c.remove(c.lru.Back())
	}
}

// state returns the rendering state kept for the session, or nil, and
// the func to call once the state is no longer read.
func (c *renderCache) state(session string) (*render.State, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.byID[session]; el != nil {
		r := el.Value.(*cachedReply)
		if r.state == nil {
			return nil, func() {}
		}
		r.users++
		return r.state, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			r.users--
			c.release(r)
		}
	}
	return nil, func() {}
}

func (c *renderCache) remove(el *list.Element) {
	r := c.lru.Remove(el).(*cachedReply)
	delete(c.byID, r.session)
	c.bytes -= r.size
	r.gone = true
	c.release(r)
}
