package server

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Headers of a reply too large for one message: the wire's (package
// protocol, and docs/OPERATING.md, "Replies larger than the max payload").
const (
	HeaderChunks       = protocol.HeaderChunks
	HeaderChunkSubject = protocol.HeaderChunkSubject
	HeaderReplyBytes   = protocol.HeaderReplyBytes
	HeaderAcceptChunks = protocol.HeaderAcceptChunks
	HeaderChunk        = protocol.HeaderChunk
)

// Defaults of chunked replies.
const (
	// DefaultChunkHoldBytes bounds the chunked replies held.
	DefaultChunkHoldBytes = 1 << 30
	// DefaultPushBytes is the largest reply pushed whole: half the 64
	// MiB a NATS server lets a client fall behind by default (its
	// max_pending) before it closes the client's connection as a slow
	// consumer, leaving room for the connection's other messages.
	DefaultPushBytes = 32 << 20
	// DefaultMaxReplyBytes is the largest reply sent in chunks: twice
	// store.DefaultMaxSessionBytes.
	DefaultMaxReplyBytes = 512 << 20
)

// Limits of held chunked replies.
const (
	// chunkTTL is how long a held reply is kept after it was made, or
	// after its latest chunk was fetched.
	chunkTTL        = 60 * time.Second
	chunkHeaderRoom = 4 << 10 // headers of a chunk message
	// requesterShares: one requester (reply subject prefix) holds at most
	// this fraction of the budget.
	requesterShares = 8
)

// Replies held for fetching.
//
// A reply held in chunks is found by an id of 128 random bits, sent only
// in the first chunk, to the request's reply subject: whoever can fetch
// it could read that reply anyway. Ids are never a sequence, so one
// client's id says nothing about another's.
//
// The bytes held are bounded, and one client must not be able to use
// the bound up for everyone by asking for large replies it never reads.
// So:
//
//   - A requester, known by its reply subject without its last token
//     (the connection's inbox prefix, for nats.go's request-reply), holds
//     at most 1/8 of the budget: past that, its own oldest replies go
//     first.
//   - When the budget is full, a new reply always finds room: the
//     replies never fetched from go first, oldest first, then those
//     fetched from least recently. A client reading its reply fetches
//     its next chunk within a round trip, so the replies evicted are
//     those nobody reads, or read slowest.
//   - A reply is forgotten 60 s after it was made or its latest chunk
//     was fetched, and once its last chunk is fetched.
//
// A client that varies its reply subjects gets a share for each, and can
// still push others' unread replies out; it cannot make a reply fail to
// be held, nor evict one being read while older unread ones are held.
// Clients that send HeaderAcceptChunks: push are not held at all, when
// the reply is at most PushBytes.
//
// Pushing is not paced: the NATS server queues every chunk for the client
// at once, and closes the client's connection when more than its
// max_pending (64 MiB by default) waits (a slow consumer): the client
// then gets nothing more. So a larger reply is held even when the client
// asks for push: it fetches the chunks one after the other, at the pace
// it reads them, which any client of protocol 3 does with a service of
// protocol 2. A reply of up to MaxReplyBytes is held whatever its
// requester's share, which then counts its older replies only.

// chunked holds the chunks of large replies until their client fetched
// them, or they expire or are evicted.
type chunked struct {
	max     int // bytes held at most
	one     int // bytes of one reply at most; 0: a requester's share
	mu      sync.Mutex
	replies map[string]*heldReply
	owners  map[string]int // bytes held by each requester
	bytes   int
}

type heldReply struct {
	id      string
	owner   string
	chunks  [][]byte
	size    int
	made    time.Time
	fetched time.Time // latest fetch; zero: none yet
	expires time.Time
}

// split cuts a reply into chunks of at most size bytes.
func split(reply []byte, size int) [][]byte {
	chunks := make([][]byte, 0, (len(reply)+size-1)/size)
	for len(reply) > 0 {
		n := min(size, len(reply))
		chunks = append(chunks, reply[:n])
		reply = reply[n:]
	}
	return chunks
}

// requester names who asked for a reply: its reply subject without the
// last token when it has three or more (nats.go's "_INBOX.<conn>.<req>"),
// else the whole subject.
func requester(reply string) string {
	if i := strings.LastIndexByte(reply, '.'); i > 0 && strings.Count(reply[:i], ".") >= 1 {
		return reply[:i]
	}
	return reply
}

// newChunkID returns 128 random bits, base64url: a subject token.
func newChunkID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// hold keeps a reply's chunks for owner; it returns the id under which
// chunks 1.. are requested, or "" when the reply is larger than one
// reply may be (one, or else a requester's share of the budget).
func (c *chunked) hold(chunks [][]byte, owner string) string {
	total := 0
	for _, ch := range chunks {
		total += len(ch)
	}
	share := c.max / requesterShares
	if one := cmp.Or(c.one, share); total > min(one, c.max) {
		return ""
	}
	// A requester's newest reply is held: its share bounds the others.
	share = max(share, total)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(now)
	if c.replies == nil {
		c.replies, c.owners = map[string]*heldReply{}, map[string]int{}
	}
	for c.owners[owner]+total > share {
		c.drop(c.oldest(func(r *heldReply) bool { return r.owner == owner }))
	}
	for c.bytes+total > c.max {
		v := c.oldest(func(r *heldReply) bool { return r.fetched.IsZero() })
		if v == nil {
			v = c.oldest(func(*heldReply) bool { return true })
		}
		c.drop(v)
	}
	id := newChunkID()
	c.replies[id] = &heldReply{id: id, owner: owner, chunks: chunks, size: total, made: now, expires: now.Add(chunkTTL)}
	c.bytes += total
	c.owners[owner] += total
	return id
}

// oldest returns the held reply matching keep that was made, or fetched
// from, least recently.
func (c *chunked) oldest(keep func(*heldReply) bool) *heldReply {
	var v *heldReply
	for _, r := range c.replies {
		if keep(r) && (v == nil || r.lastUse().Before(v.lastUse())) {
			v = r
		}
	}
	return v
}

func (r *heldReply) lastUse() time.Time {
	if r.fetched.IsZero() {
		return r.made
	}
	return r.fetched
}

func (c *chunked) drop(r *heldReply) {
	delete(c.replies, r.id)
	c.bytes -= r.size
	if c.owners[r.owner] -= r.size; c.owners[r.owner] <= 0 {
		delete(c.owners, r.owner)
	}
}

// get returns chunk k of a held reply, and whether it is the last. The
// reply is forgotten once its last chunk is sent (sent), not when it is
// asked for: a fetch refused for room (503) can be asked again.
func (c *chunked) get(id string, k int) (chunk []byte, last, ok bool) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(now)
	r := c.replies[id]
	if r == nil || k < 1 || k >= len(r.chunks) {
		return nil, false, false
	}
	r.fetched, r.expires = now, now.Add(chunkTTL)
	return r.chunks[k], k == len(r.chunks)-1, true
}

// sent forgets a held reply whose last chunk was sent.
func (c *chunked) sent(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.replies[id]; r != nil {
		c.drop(r)
	}
}

func (c *chunked) expire(now time.Time) {
	for _, r := range c.replies {
		if now.After(r.expires) {
			c.drop(r)
		}
	}
}

// respondChunked sends a reply larger than the max payload: the first
// chunk answers the request, with headers that say how to get the rest.
// A request that accepts pushed chunks gets all of them on its reply
// subject when the reply is at most PushBytes; any other has the rest
// held for it to fetch. A reply over MaxReplyBytes is refused.
func (s *Service) respondChunked(r micro.Request, out []byte, maxPayload int64) error {
	if s.MaxReplyBytes > 0 && len(out) > s.MaxReplyBytes {
		return &tooLargeError{size: len(out), max: s.MaxReplyBytes}
	}
	chunks := split(out, int(maxPayload)-chunkHeaderRoom)
	n := strconv.Itoa(len(chunks))
	if r.Headers().Get(HeaderAcceptChunks) == protocol.AcceptChunksPush && len(out) <= s.PushBytes {
		hdr := micro.Headers{
			HeaderChunks:     []string{n},
			HeaderChunk:      []string{"0"},
			HeaderReplyBytes: []string{strconv.Itoa(len(out))},
		}
		if err := r.Respond(chunks[0], micro.WithHeaders(hdr)); err != nil {
			return err
		}
		for k := 1; k < len(chunks); k++ {
			m := &nats.Msg{Subject: r.Reply(), Data: chunks[k], Header: nats.Header{
				HeaderChunks: []string{n},
				HeaderChunk:  []string{strconv.Itoa(k)},
			}}
			if err := s.conn(r).PublishMsg(m); err != nil {
				return err
			}
		}
		return nil
	}
	id := s.chunks.hold(chunks, requester(r.Reply()))
	if id == "" {
		return errTooLarge
	}
	hdr := micro.Headers{
		HeaderChunks:       []string{n},
		HeaderChunkSubject: []string{s.chunkPrefix + "." + id},
		HeaderReplyBytes:   []string{strconv.Itoa(len(out))},
	}
	return r.Respond(chunks[0], micro.WithHeaders(hdr))
}

// handleChunk answers ctxd.chunk.<instance>.<id>.<k>.
func (s *Service) handleChunk(r micro.Request) {
	if !s.replyAllowed(r.Subject(), r.Reply()) {
		return
	}
	r = s.observe(r, "chunk", time.Now())
	rest := r.Subject()[len(s.chunkPrefix):] // .<id>.<k>
	var id string
	var k int
	if len(rest) > 1 {
		rest = rest[1:]
		for i := len(rest) - 1; i >= 0; i-- {
			if rest[i] == '.' {
				id = rest[:i]
				k, _ = strconv.Atoi(rest[i+1:])
				break
			}
		}
	}
	chunk, last, ok := s.chunks.get(id, k)
	if !ok {
		s.fail(r, errNoChunk)
		return
	}
	// A chunk is a large reply: on its own connection, off the endpoint's
	// goroutine, so that small replies do not wait behind it.
	send := func(r micro.Request) {
		if err := r.Respond(chunk); err != nil {
			s.log("respond", "err", err)
			return
		}
		if last {
			s.chunks.sent(id)
		}
	}
	if !s.sendLarge(r, len(chunk), send) {
		send(r)
	}
}
