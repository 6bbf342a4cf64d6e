package server

import (
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
)

// Headers of a reply too large for one message (see the README,
// "Replies larger than the max payload").
const (
	// HeaderChunks is the number of chunks the reply has; the first is
	// the message carrying the header.
	HeaderChunks = "Ctxd-Chunks"
	// HeaderChunkSubject is the subject prefix the other chunks are
	// requested on: PREFIX.<k> answers chunk k, for k = 1 .. chunks-1.
	HeaderChunkSubject = "Ctxd-Chunk-Subject"
	// HeaderReplyBytes is the size of the whole reply.
	HeaderReplyBytes = "Ctxd-Reply-Bytes"
)

// Limits of held chunked replies.
const (
	chunkTTL        = 60 * time.Second
	maxHeldBytes    = 1 << 30
	chunkHeaderRoom = 4 << 10 // headers of a chunk message
)

// chunked holds the chunks of large replies until their client fetched
// them, or they expire.
type chunked struct {
	mu      sync.Mutex
	replies map[string]*heldReply
	bytes   int
}

type heldReply struct {
	chunks  [][]byte
	expires time.Time
	size    int
}

// hold splits a reply into chunks of at most size bytes and keeps them;
// it returns the id under which chunks 1.. are requested, or "" when too
// many bytes are held already.
func (c *chunked) hold(reply []byte, size int) (string, [][]byte) {
	var chunks [][]byte
	for len(reply) > 0 {
		n := min(size, len(reply))
		chunks = append(chunks, reply[:n])
		reply = reply[n:]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(time.Now())
	total := 0
	for _, ch := range chunks {
		total += len(ch)
	}
	if c.bytes+total > maxHeldBytes {
		return "", nil
	}
	if c.replies == nil {
		c.replies = map[string]*heldReply{}
	}
	id := nuid.Next()
	c.replies[id] = &heldReply{chunks: chunks, expires: time.Now().Add(chunkTTL), size: total}
	c.bytes += total
	return id, chunks
}

// get returns chunk k of a held reply; the reply is forgotten once its
// last chunk was fetched.
func (c *chunked) get(id string, k int) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(time.Now())
	r := c.replies[id]
	if r == nil || k < 1 || k >= len(r.chunks) {
		return nil, false
	}
	if k == len(r.chunks)-1 {
		delete(c.replies, id)
		c.bytes -= r.size
	}
	return r.chunks[k], true
}

func (c *chunked) expire(now time.Time) {
	for id, r := range c.replies {
		if now.After(r.expires) {
			delete(c.replies, id)
			c.bytes -= r.size
		}
	}
}

// respondChunked sends a reply larger than the max payload: the first
// chunk answers the request, with headers that say how to fetch the rest.
func (s *Service) respondChunked(r micro.Request, out []byte, maxPayload int64) error {
	size := int(maxPayload) - chunkHeaderRoom
	id, chunks := s.chunks.hold(out, size)
	if id == "" {
		return errTooLarge
	}
	hdr := micro.Headers{
		HeaderChunks:       []string{strconv.Itoa(len(chunks))},
		HeaderChunkSubject: []string{s.chunkPrefix + "." + id},
		HeaderReplyBytes:   []string{strconv.Itoa(len(out))},
	}
	return r.Respond(chunks[0], micro.WithHeaders(hdr))
}

// handleChunk answers ctxd.chunk.<instance>.<id>.<k>.
func (s *Service) handleChunk(r micro.Request) {
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
	chunk, ok := s.chunks.get(id, k)
	if !ok {
		s.fail(r, errNoChunk)
		return
	}
	if err := r.Respond(chunk); err != nil {
		s.log("respond", "err", err)
	}
}
