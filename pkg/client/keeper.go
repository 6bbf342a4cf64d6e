package client

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/protocol"
)

// Keeper keeps the last context reply of each session, format and
// encoding it fetched, and asks for the next one against it (have_seq,
// have_digest): the service then sends only the messages that follow
// those the reply held in common with the new one, and Keeper puts the
// whole reply back together (protocol.ApplyDelta), checked against its
// digest. Its Context returns whole replies, byte for byte as a request
// without a base would get them; they carry their digest. A reply that
// does not add up is asked again whole: never a wrong context.
//
// A Keeper holds one reply per session, format and encoding until
// Forget; the zero Keeper is ready to use, and safe for concurrent use.
type Keeper struct {
	// Off turns deltas off: every reply is asked for whole.
	Off bool

	mu   sync.Mutex
	held map[keptKey]*protocol.Held
}

type keptKey struct {
	session, format string
	msgpack         bool
}

// Context is the package's Context, as a delta against the reply held
// for the session when there is one; it returns the whole reply.
func (k *Keeper) Context(ctx context.Context, nc *nats.Conn, session string, req Request) ([]byte, error) {
	if k.Off {
		return Context(ctx, nc, session, req)
	}
	key := keptKey{session, req.Format, req.Msgpack}
	if key.format == "neutral" {
		key.format = ""
	}
	k.mu.Lock()
	h, ok := k.held[key]
	k.mu.Unlock()
	req.NoDigest, req.askDigest = false, true
	if ok {
		req.HaveSeq, req.HaveDigest = h.Reply.Seq, h.Reply.Digest
	}
	body, err := Context(ctx, nc, session, req)
	if err != nil {
		return nil, err
	}
	var next *protocol.Held
	if ok {
		next, err = h.Apply(body)
	} else {
		next, err = protocol.Hold(body)
	}
	if err != nil && ok {
		// Asked again without a base: a whole reply, or the error.
		req.HaveSeq, req.HaveDigest = 0, ""
		if body, err = Context(ctx, nc, session, req); err != nil {
			return nil, err
		}
		next, err = protocol.Hold(body)
	}
	if err != nil {
		return nil, err
	}
	if next.Reply.Digest != "" {
		k.mu.Lock()
		if k.held == nil {
			k.held = map[keptKey]*protocol.Held{}
		}
		if cur, ok := k.held[key]; !ok || cur.Reply.Seq <= next.Reply.Seq {
			k.held[key] = next
		}
		k.mu.Unlock()
	}
	return next.Body, nil
}

// Forget lets go of the replies held for the session.
func (k *Keeper) Forget(session string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key := range k.held {
		if key.session == session {
			delete(k.held, key)
		}
	}
}
