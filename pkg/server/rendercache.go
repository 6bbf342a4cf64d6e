package server

import (
	"bytes"
	"container/list"
	"sync"
	"weak"

	"github.com/ctxd/ctxd/pkg/projection"
)

// DefaultRenderCacheBytes bounds the rendered replies a Service keeps.
const DefaultRenderCacheBytes = 64 << 20

// renderCache keeps the latest rendered reply of each session, so that a
// session fetched again unchanged is answered as fast as the neutral reply,
// which the session itself keeps. One reply per session, whatever format
// it was rendered in: a session's memory grows by at most one reply, and
// all the replies kept together by at most max bytes, the least recently
// used going first.
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
	return r.reply, len(r.reply)
}

// put keeps reply, which is never written again, for the session. A
// reply whose buffer is much larger than itself is kept as a copy: what
// is kept holds the memory it is counted for.
func (c *renderCache) put(session string, p *projection.Session, req contextRequest, reply []byte) {
	if p == nil || c.max <= 0 || len(reply) > c.max/4 {
		return
	}
	if cap(reply)-len(reply) > len(reply)/4 {
		reply = bytes.Clone(reply)
	}
	reply = reply[:len(reply):len(reply)]
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]*list.Element{}
	}
	if el := c.byID[session]; el != nil {
		c.remove(el)
	}
	r := &cachedReply{session: session, proj: weak.Make(p), version: p.Version(), seq: p.Seq(), key: keyOf(req), reply: reply}
	c.byID[session] = c.lru.PushFront(r)
	c.bytes += len(reply)
	for c.bytes > c.max {
		c.remove(c.lru.Back())
	}
}

func (c *renderCache) remove(el *list.Element) {
	r := c.lru.Remove(el).(*cachedReply)
	delete(c.byID, r.session)
	c.bytes -= len(r.reply)
}
