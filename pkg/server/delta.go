package server

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// Delta replies (PROTOCOL.md, "Delta replies"). A reply asked with
// digest, or with have_seq and have_digest, carries the digest of its
// message array (protocol.Chain). The service keeps, for each session,
// format and encoding, the chain of every prefix of the latest reply's
// array and of the one before (digestIndex): the chain of the next reply
// goes on from the elements it shares with the latest, which only the
// elements after are hashed for, and a client holding either reply gets
// the elements from the first that differs, with "delta": {"keep": K}.
//
// What a reply shares with the one before is known without decoding
// either: a neutral reply's items are the projection's buffer of encoded
// messages, which it only appends to or replaces, never writes: the
// same buffer, grown, holds every item of the reply before, and another
// buffer is compared with the one before byte for byte while it lives
// (sharedItems); a neutral reply with a budget, rendered from the
// messages decoded, shares the messages it has in common by identity and
// record sequence; a provider format's rendering says which bytes of its
// items it kept from the rendering before (render.State.KeptItems). A
// reply the service cannot relate to the one before is hashed whole. A client's base the service does not
// hold (another instance's, evicted, a digest it did not send) gets the
// whole reply: the context made from a delta is always the one a whole
// reply holds.

// DefaultDigestBytes bounds the memory of the kept chains: about 56
// bytes a message of the latest reply, 32 of the one before; 16 MiB
// holds those of 190 000 messages.
const DefaultDigestBytes = 16 << 20

// held is the reply a client holds: have_seq and have_digest.
type held struct {
	seq    uint64
	digest string
}

// digestKey names the replies whose chains follow each other.
type digestKey struct {
	session, format string
	msgpack         bool
	// rendered: a neutral reply with a budget is made apart from the
	// neutral reply (rendered.go); their chains do not go on from
	// each other.
	rendered bool
}

// digestIndex is the chain of a reply's message array.
type digestIndex struct {
	proj         weak.Pointer[projection.Session]
	version, seq uint64
	state        uint64         // the render.State's ID; 0 for the neutral format
	ends         blockList[int] // where each item ends, from the first item's start
	chain        blockList[protocol.Chain]
	cache        weak.Pointer[byte] // the projection's buffer the items were in (arrayOf.cached)
	// A neutral reply with a budget (rendered apart from the buffer):
	// its messages, compared by identity with the next one's.
	msgs     []weak.Pointer[record.Map]
	seqs     []uint64
	digest   string
	items    int         // the bytes of the items, separators included
	prev     *baseChain  // the reply before, whose digest differs
	extended atomic.Bool // a later index appended to the slices in place
}

// baseChain is a reply a client may hold besides the latest.
type baseChain struct {
	seq    uint64
	digest string
	chain  blockList[protocol.Chain]
}

func (x *digestIndex) size() int64 {
	n := int64(x.ends.len())*(8+32) + int64(len(x.msgs))*16 + 256
	if x.prev != nil {
		n += int64(x.prev.chain.len()) * 32
	}
	return n
}

// digests keeps the latest index of each key, the least recently used
// going first past max bytes.
type digests struct {
	max  int64
	mu   sync.Mutex
	size int64
	m    map[digestKey]*list.Element
	lru  list.List
	// goneOn counts the replies indexed from the one before, hashing
	// only what followed what they shared; mismatched those whose last
	// item said to be shared was not.
	goneOn, mismatched atomic.Int64
	// appended counts the neutral replies whose messages the projection
	// only appended to.
	appended atomic.Int64
}

type digestEntry struct {
	key digestKey
	x   *digestIndex
	n   int64
}

func (d *digests) get(k digestKey) *digestIndex {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.m[k]; ok {
		d.lru.MoveToFront(e)
		return e.Value.(*digestEntry).x
	}
	return nil
}

func (d *digests) put(k digestKey, x *digestIndex) {
	n := x.size()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[digestKey]*list.Element{}
	}
	if e, ok := d.m[k]; ok {
		de := e.Value.(*digestEntry)
		d.size += n - de.n
		de.x, de.n = x, n
		d.lru.MoveToFront(e)
	} else {
		d.m[k] = d.lru.PushFront(&digestEntry{key: k, x: x, n: n})
		d.size += n
	}
	for d.size > d.max && d.lru.Len() > 0 {
		e := d.lru.Back()
		de := e.Value.(*digestEntry)
		d.lru.Remove(e)
		delete(d.m, de.key)
		d.size -= de.n
	}
}

// errNoDigest: a reply whose array could not be read back. It is a bug:
// the reply is an error rather than a digest that may be wrong.
var errNoDigest = errors.New("digest of the reply")

// arrayOf is a reply's message array: its items (in JSON, what follows
// them too, from the closing bracket on), count of them in msgpack
// (-1: JSON), and the encoding of the body's other field.
type arrayOf struct {
	items []byte
	count int
	other []byte
	// cached: items are the projection's cache of the encoded messages
	// (projection.Session.JSONBody, MsgpackBody), which it never writes
	// once handed out: the same buffer, as long or longer, holds the
	// items it held.
	cached bool
}

// indexReply returns the index of a reply's array, the reply being for
// p, going on from the index of the reply before when it can. st is the
// rendering state of the reply, nil when there is none.
func (s *Service) indexReply(arr arrayOf, session string, p *projection.Session, req contextRequest, st *render.State) (*digestIndex, error) {
	out := arr.items
	key := digestKey{session, string(req.format), req.msgpack, req.rendered()}
	// An edited reply is made whole for each request (edited.go), from
	// the same projection as the unedited one: its chain is its own,
	// hashed whole and kept nowhere.
	keep := req.edits == nil
	var old *digestIndex
	if keep {
		old = s.digests.get(key)
	}
	x := &digestIndex{}
	if p != nil {
		x.proj, x.version, x.seq = weak.Make(p), p.Version(), p.Seq()
	}
	if st != nil {
		x.state = st.ID()
	}
	sameProj := old != nil && p != nil && old.proj == x.proj
	if sameProj && old.version == x.version && old.seq == x.seq && (st == nil || old.state == x.state) {
		// The same context as the latest reply: the same array.
		return old, nil
	}
	kept := 0 // the items of old that out holds too
	var msgs []any
	var seqs []uint64
	byIdentity := req.format == render.Neutral && req.rendered() && p != nil
	if byIdentity {
		// Rendered from the messages decoded: the rendering has them.
		msgs, seqs = p.Messages(), p.MessageSeqs(make([]uint64, 0, p.Len()))
	}
	if arr.cached && len(arr.items) > 0 {
		x.cache = weak.Make(&arr.items[0])
	}
	switch {
	case !sameProj:
	case req.format == render.Neutral && arr.cached && len(arr.items) >= old.items && old.cache == x.cache && old.cache.Value() != nil:
		// The projection appended to the buffer the reply before was
		// in: every item of it is here, as it was.
		kept = old.chain.len()
		s.digests.appended.Add(1)
	case byIdentity:
		kept = firstChanged(old.msgs, old.seqs, msgs, seqs)
	case req.format == render.Neutral:
		kept = old.sharedItems(out)
	case st != nil && st.From() != 0 && st.From() == old.state:
		kept = sortSearch(old.ends.len(), func(i int) bool { return old.ends.at(i) > st.KeptItems() })
	}
	if old != nil {
		kept = min(kept, old.chain.len())
	}
	if kept > 0 && !old.holds(out, kept-1, req.msgpack) {
		// Not where the reply before had it: what was kept is not what
		// it seemed. Hashed whole, rather than a digest that may be wrong.
		s.digests.mismatched.Add(1)
		kept = 0
	}
	if kept > 0 {
		inPlace := kept == old.chain.len() && old.extended.CompareAndSwap(false, true)
		x.ends, x.chain = old.ends.prefix(kept, inPlace), old.chain.prefix(kept, inPlace)
		if byIdentity && inPlace {
			x.msgs, x.seqs = old.msgs, old.seqs
		} else if byIdentity && old.msgs != nil {
			x.msgs, x.seqs = slices.Clone(old.msgs[:kept]), slices.Clone(old.seqs[:kept])
		}
	}
	var c protocol.Chain
	i := 0
	if kept > 0 {
		s.digests.goneOn.Add(1)
		c, i = x.chain.at(kept-1), x.ends.at(kept-1)
		if !req.msgpack && i < len(out) && out[i] == ',' {
			i++
		}
	}
	for n := kept; ; n++ {
		if req.msgpack && n == arr.count || !req.msgpack && (i >= len(out) || out[i] == ']') {
			break
		}
		e, err := protocol.SkipValue(out, i, req.msgpack)
		if err != nil {
			return nil, fmt.Errorf("%w: item %d: %w", errNoDigest, n, err)
		}
		c = c.Next(out[i:e])
		x.chain.add(c)
		x.ends.add(e)
		i = e
		if !req.msgpack && i < len(out) && out[i] == ',' {
			i++
		}
	}
	if byIdentity {
		if x.chain.len() != len(msgs) {
			return nil, fmt.Errorf("%w: %d items for %d messages", errNoDigest, x.chain.len(), len(msgs))
		}
		for _, v := range msgs[len(x.msgs):] {
			m, _ := v.(*record.Map)
			x.msgs = append(x.msgs, weak.Make(m))
		}
		x.seqs = append(x.seqs, seqs[len(x.seqs):]...)
	}
	x.items = i
	if !req.msgpack {
		if i < len(out) && out[i] != ']' || i == len(out) && !arr.cached {
			return nil, fmt.Errorf("%w: the array does not end at %d", errNoDigest, i)
		}
	}
	x.digest = c.Digest(arr.other)
	if old != nil && old.digest != x.digest {
		x.prev = &baseChain{seq: old.seq, digest: old.digest, chain: old.chain}
	} else if old != nil {
		x.prev = old.prev
	}
	if keep {
		s.digests.put(key, x)
	}
	return x, nil
}

// holds reports whether items, the items of a reply, have x's item k
// where x has it: the check of a shared prefix's last item, whose bytes
// must hash, after the chain before them, to the chain x has for it.
func (x *digestIndex) holds(items []byte, k int, msgpack bool) bool {
	from := 0
	var c protocol.Chain
	if k > 0 {
		from, c = x.ends.at(k-1), x.chain.at(k-1)
		if !msgpack {
			from++ // the comma
		}
	}
	to := x.ends.at(k)
	return to <= len(items) && from <= to && c.Next(items[from:to]) == x.chain.at(k)
}

// firstChanged is the index of the first message that differs between
// two versions of a context: by identity (the projection hands out a
// message it changes as a new value) and record sequence.
func firstChanged(old []weak.Pointer[record.Map], oldSeqs []uint64, cur []any, curSeqs []uint64) int {
	n := min(len(old), len(cur), len(oldSeqs), len(curSeqs))
	for i := range n {
		m, ok := cur[i].(*record.Map)
		if !ok || m == nil || old[i].Value() != m || oldSeqs[i] != curSeqs[i] {
			return i
		}
	}
	return n
}

// sharedItems returns how many whole items of x's array the items out
// begin with, compared byte for byte with the buffer x's items were in,
// while it lives: the projection's cache of encoded messages, which it
// never writes once handed out (arrayOf.cached). An item is a value
// complete in itself: the same bytes from its start are the same item.
// 0 when the buffer is gone or was not the projection's.
func (x *digestIndex) sharedItems(out []byte) int {
	p := x.cache.Value()
	if p == nil || x.items == 0 {
		return 0
	}
	prev := unsafe.Slice(p, x.items)
	n := 0
	for n < len(prev) && n < len(out) {
		// Compared in steps: bytes.Equal is memcmp.
		step := min(len(prev)-n, len(out)-n, 4096)
		if !bytes.Equal(prev[n:n+step], out[n:n+step]) {
			for prev[n] == out[n] {
				n++
			}
			break
		}
		n += step
	}
	return sortSearch(x.ends.len(), func(i int) bool { return x.ends.at(i) > n })
}

// base returns how many items of x the client holding h holds first, 0
// when the service does not know h.
func (x *digestIndex) base(h *held) int {
	bases := []baseChain{{x.seq, x.digest, x.chain}}
	if x.prev != nil {
		bases = append(bases, *x.prev)
	}
	for _, b := range bases {
		if b.digest != h.digest || b.seq != h.seq {
			continue
		}
		// The chains agree up to the first item that differs.
		n := min(b.chain.len(), x.chain.len())
		return sortSearch(n, func(i int) bool { return b.chain.at(i) != x.chain.at(i) })
	}
	return 0
}

func sortSearch(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if !f(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// withDigest appends to dst the reply made of head (up to the array's
// items: in msgpack, before the array's header), the array's items and
// tail, with its digest and, when keep > 0, as a delta: its array
// holding the items from keep on. With has, the parts are of a reply
// that ends with its digest already (digestIn): the map's size in head
// counts it, and tail ends with it. The parts are not written: they may
// be shared.
func withDigest(dst, head, items, tail []byte, x *digestIndex, keep int, msgpack, has bool) ([]byte, error) {
	if has {
		var ok bool
		if tail, ok = trimDigest(tail, x.digest, msgpack); !ok {
			return nil, fmt.Errorf("%w: a reply that does not end with its digest", errNoDigest)
		}
	}
	from := 0
	if keep > 0 {
		from = x.ends.at(keep - 1)
		if !msgpack && keep < x.ends.len() {
			from++ // the comma
		}
	}
	dst = grow(dst[:0], len(head)+len(items)-from+len(tail)+2*protocol.DigestLen+48)
	if msgpack {
		if len(head) == 0 || head[0]&0xf0 != 0x80 || head[0]&0x0f > 13 {
			return nil, fmt.Errorf("%w: a reply that is not a small map", errNoDigest)
		}
		add := byte(1)
		if keep > 0 {
			add = 2
		}
		if has {
			add--
		}
		dst = append(dst, head[0]+add)
		dst = append(dst, head[1:]...)
		dst = record.AppendMsgpackArrayLen(dst, x.ends.len()-keep)
		dst = append(dst, items[from:]...)
		dst = append(dst, tail...)
		dst = record.AppendMsgpackString(dst, "digest")
		dst = record.AppendMsgpackString(dst, x.digest)
		if keep > 0 {
			dst = record.AppendMsgpackString(dst, "delta")
			dst = record.AppendMsgpackMapLen(dst, 1)
			dst = record.AppendMsgpackString(dst, "keep")
			dst = record.AppendMsgpackInt(dst, int64(keep))
		}
		return dst, nil
	}
	if len(tail) == 0 || tail[len(tail)-1] != '}' {
		return nil, fmt.Errorf("%w: a reply that does not end its object", errNoDigest)
	}
	dst = append(dst, head...)
	dst = append(dst, items[from:]...)
	dst = append(dst, tail[:len(tail)-1]...)
	dst = append(dst, `,"digest":"`...)
	dst = append(dst, x.digest...)
	dst = append(dst, '"')
	if keep > 0 {
		dst = append(dst, `,"delta":{"keep":`...)
		dst = strconv.AppendInt(dst, int64(keep), 10)
		dst = append(dst, '}')
	}
	return append(dst, '}'), nil
}

// trimDigest returns the tail of a reply that ends with the member
// digest, whose value is digest, without that member: in JSON, up to the
// closing brace, kept.
func trimDigest(tail []byte, digest string, msgpack bool) ([]byte, bool) {
	var member []byte
	if msgpack {
		member = record.AppendMsgpackString(record.AppendMsgpackString(nil, "digest"), digest)
	} else {
		member = append(append([]byte(`,"digest":"`), digest...), `"}`...)
	}
	if !bytes.HasSuffix(tail, member) {
		return nil, false
	}
	tail = tail[:len(tail)-len(member)]
	if !msgpack {
		tail = tail[:len(tail):len(tail)] // the closing brace follows: withDigest writes its own
		return append(tail, '}'), true
	}
	return tail, true
}

// indexOf indexes out, a whole reply for p rendered with st (nil when
// there is none), whose array Locate finds.
func (s *Service) indexOf(out []byte, session string, p *projection.Session, req contextRequest, st *render.State) (*digestIndex, protocol.Located, error) {
	loc, err := protocol.Locate(out)
	if err != nil {
		return nil, loc, fmt.Errorf("%w: %w", errNoDigest, err)
	}
	x, err := s.indexReply(arrayOf{items: out[loc.ItemsAt:], count: loc.Count, other: loc.Other}, session, p, req, st)
	return x, loc, err
}

// renderedDigest is the digest of a whole reply in a provider format,
// made with st (renderCache.digest).
func (s *Service) renderedDigest(out []byte, session string, p *projection.Session, req contextRequest, st *render.State) (string, error) {
	x, _, err := s.indexOf(out, session, p, req, st)
	if err != nil {
		return "", err
	}
	return x.digest, nil
}

// digested appends to dst out, the reply for p, with its digest, and as
// a delta when the request's base allows one; own reports that the
// result is in dst or a buffer of its own. With has, out ends with its
// digest already (digestIn): a whole reply is out itself (own false:
// it may be the reply kept, which is never written).
func (s *Service) digested(dst, out []byte, session string, p *projection.Session, req contextRequest, made *cachedReply, has bool) (reply []byte, own bool, err error) {
	var st *render.State
	if made != nil {
		st = made.state
	}
	x, loc, err := s.indexOf(out, session, p, req, st)
	if err != nil {
		return nil, false, err
	}
	keep := s.keepFor(x, req)
	if has && keep == 0 {
		return out, false, nil
	}
	head := out[:loc.ItemsAt]
	if req.msgpack {
		head = out[:loc.ArrayAt]
	}
	end := loc.ItemsAt + x.items
	reply, err = withDigest(dst, head, out[loc.ItemsAt:end], out[end:], x, keep, req.msgpack, has)
	return reply, err == nil, err
}

// keepFor is the delta's keep for the request: 0 for a whole reply.
func (s *Service) keepFor(x *digestIndex, req contextRequest) int {
	if req.have == nil {
		return 0
	}
	return x.base(req.have)
}

// digestedNeutral is digested for the neutral reply, appended to dst
// from the session's encoded messages as its cache holds them: a delta
// costs what it sends, and the cache, never written once handed out, is
// only appended to while the session is (digestIndex.cache).
func (s *Service) digestedNeutral(dst []byte, session string, p *projection.Session, req contextRequest) ([]byte, error) {
	var body []byte
	n := -1
	if req.msgpack {
		var err error
		if body, n, err = p.MsgpackBody(); err != nil {
			return nil, fmt.Errorf("%w: %w", errNotMsgpack, err)
		}
	} else {
		body, _ = p.JSONBody()
	}
	x, err := s.indexReply(arrayOf{items: body, count: n, cached: true}, session, p, req, nil)
	if err != nil {
		return nil, err
	}
	keep := s.keepFor(x, req)
	if !req.msgpack {
		return withDigest(dst, appendReplyJSONHead(nil, session, p.Seq()), body[:x.items], appendReplyJSONTail(nil, p.Dropped()), x, keep, false, false)
	}
	var buf [256]byte
	head := record.AppendMsgpackMapLen(buf[:0], 4)
	head = record.AppendMsgpackString(head, "session")
	head = record.AppendMsgpackString(head, session)
	head = record.AppendMsgpackString(head, "seq")
	head = appendMsgpackUint(head, p.Seq())
	head = record.AppendMsgpackString(head, "messages")
	tail := record.AppendMsgpackString(nil, "dropped")
	if tail, err = record.AppendMsgpack(tail, p.Dropped().Map()); err != nil {
		return nil, fmt.Errorf("%w: %w", errNotMsgpack, err)
	}
	return withDigest(dst, head, body[:x.items], tail, x, keep, true, false)
}
