package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/ctxd/ctxd/pkg/protocol"
)

// Do sends a request to the service and returns the reply body, joining
// the chunks of a reply larger than the max payload. It asks for the
// chunks to be pushed to its own inbox (Ctxd-Accept-Chunks: push), so
// the service holds nothing for it. A service that does not push
// (protocol 2), or not a reply that large (more than the NATS server
// lets a connection fall behind), names a subject to fetch them from,
// and Do fetches them one after the other: at most one waits for it at
// the NATS server, whatever the reply's size.
//
// Every request of the service is a read: when the connection is lost
// while the request waits, Do sends it again once the connection is
// back (nats.go reconnects), within ctx's deadline; at the deadline, or
// when the connection closes, its error wraps ErrConnectionLost. It
// does not hedge: Context does.
func Do(ctx context.Context, nc *nats.Conn, msg *nats.Msg) ([]byte, error) {
	x := exchange{subject: msg.Subject, again: msg.Subject, header: msg.Header, first: msg.Data}
	x.body = func() []byte { return msg.Data }
	return x.do(ctx, nc)
}

// ErrConnectionLost is wrapped by the error of a request whose
// connection to the NATS server was lost while it waited, and closed,
// or came back too late for an answer within the deadline.
var ErrConnectionLost = errors.New("the connection to the NATS server was lost")

// exchange is one request and the sends it takes to get its reply: the
// first, a hedge, one after each reconnect.
type exchange struct {
	subject string // of the first send
	again   string // of the hedge and of a send after a reconnect
	header  nats.Header
	first   []byte        // the first send's body
	body    func() []byte // a later send's body, with the time left then
	// hedge, when not 0, is when the request is sent to again if no
	// reply has come.
	hedge        time.Duration
	hedged       bool          // the request went to again
	chunkTimeout time.Duration // Request.ChunkTimeout

	in    chan delivery // every message of every send
	done  chan struct{} // closed when the exchange returns
	sends []*send
	lost  time.Time // when the connection was lost, zero while it is up
	// resent is when the request was last sent after a reconnect.
	resent time.Time
}

// send is one publish of an exchange's request, on an inbox of its own
// so that the replies of two sends never mix.
type send struct {
	subject string
	sub     *nats.Subscription
	dead    bool // answered "no responders"
}

// delivery is a message to a send's inbox.
type delivery struct {
	s *send
	m *nats.Msg
}

// errReconnected ends the wait for a reply's chunks when the connection
// was lost meanwhile: the request is sent again.
var errReconnected = errors.New("reconnected")

// do sends x's request and returns the reply's body, whole.
func (x *exchange) do(ctx context.Context, nc *nats.Conn) ([]byte, error) {
	x.in, x.done = make(chan delivery, 4), make(chan struct{})
	defer close(x.done)
	defer func() {
		for _, s := range x.sends {
			if s.sub != nil {
				s.sub.Unsubscribe()
			}
		}
	}()
	// Listened to before the first send: a loss right after it counts.
	status := nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(status)
	if nc.IsReconnecting() {
		x.lost = time.Now()
	}
	if err := x.send(nc, x.subject, x.first); err != nil {
		return nil, err
	}
	var hedge <-chan time.Time
	if x.hedge > 0 {
		t := time.NewTimer(x.hedge)
		defer t.Stop()
		hedge = t.C
	}
	for {
		reply, err := x.reply(ctx, nc, status, &hedge)
		if err != nil {
			return nil, err
		}
		data, err := x.chunks(ctx, nc, status, reply)
		if !errors.Is(err, errReconnected) {
			return data, err
		}
	}
}

// send publishes the request to subj from a new inbox.
func (x *exchange) send(nc *nats.Conn, subj string, body []byte) error {
	s := &send{subject: subj}
	inbox := nc.NewInbox()
	// A subscription of its own, read through a small channel: a sync
	// subscription would allocate a queue of 64k messages per request.
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		select {
		case x.in <- delivery{s, m}:
		case <-x.done:
		}
	})
	if err != nil {
		return fmt.Errorf("request %s: %w", subj, err)
	}
	s.sub = sub
	x.sends = append(x.sends, s)
	// The pushed chunks of one reply may together exceed the default
	// bound on what a subscription queues: the reply's size bounds them.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return fmt.Errorf("request %s: %w", subj, err)
	}
	m := &nats.Msg{Subject: subj, Reply: inbox, Data: body, Header: nats.Header{}}
	for k, v := range x.header {
		m.Header[k] = v
	}
	m.Header.Set(headerAcceptChunks, protocol.AcceptChunksPush)
	if err := nc.PublishMsg(m); err != nil {
		return fmt.Errorf("request %s: %w", subj, err)
	}
	return nil
}

// reply waits for the first reply of any send, hedging when *hedge
// fires and sending again after a reconnect; the other sends are
// dropped.
func (x *exchange) reply(ctx context.Context, nc *nats.Conn, status <-chan nats.Status, hedge *<-chan time.Time) (delivery, error) {
	for {
		select {
		case d := <-x.in:
			if d.s.dead || d.s.sub == nil {
				continue
			}
			if len(d.m.Data) == 0 && d.m.Header.Get("Status") == "503" {
				// Nobody listens on d's subject.
				d.s.dead = true
				if !x.hedged && x.again != d.s.subject {
					*hedge, x.hedged = nil, true
					if err := x.send(nc, x.again, x.body()); err != nil {
						return delivery{}, err
					}
					continue
				}
				if x.pending() == 0 && x.lost.IsZero() {
					return delivery{}, fmt.Errorf("%w on %s", ErrNoService, d.s.subject)
				}
				continue
			}
			x.drop(d.s)
			return d, nil
		case <-*hedge:
			*hedge, x.hedged = nil, true
			if !x.lost.IsZero() {
				continue // sent again once the connection is back
			}
			if err := x.send(nc, x.again, x.body()); err != nil {
				return delivery{}, err
			}
		case st := <-status:
			if _, err := x.status(nc, st); err != nil {
				return delivery{}, err
			}
		case <-ctx.Done():
			return delivery{}, x.expired(ctx)
		}
	}
}

// pending counts the sends that may still be answered.
func (x *exchange) pending() int {
	n := 0
	for _, s := range x.sends {
		if !s.dead && s.sub != nil {
			n++
		}
	}
	return n
}

// drop unsubscribes every send but keep.
func (x *exchange) drop(keep *send) {
	for _, s := range x.sends {
		if s != keep && s.sub != nil {
			s.sub.Unsubscribe()
			s.sub = nil
		}
	}
}

// status follows the connection: lost, it waits; back, it sends the
// request again (what was in flight went with the old connection);
// closed, it ends the request. It reports whether it sent the request.
func (x *exchange) status(nc *nats.Conn, st nats.Status) (bool, error) {
	switch st {
	case nats.RECONNECTING, nats.DISCONNECTED:
		if x.lost.IsZero() {
			x.lost = time.Now()
		}
	case nats.CONNECTED:
		if x.lost.IsZero() {
			return false, nil
		}
		x.lost, x.resent = time.Time{}, time.Now()
		return true, x.send(nc, x.again, x.body())
	case nats.CLOSED:
		return false, fmt.Errorf("request %s: %w, and the connection is closed", x.subject, ErrConnectionLost)
	}
	return false, nil
}

// expired is the error of a request whose ctx ended without an answer:
// it says so when the connection was lost meanwhile.
func (x *exchange) expired(ctx context.Context) error {
	switch {
	case !x.lost.IsZero():
		return fmt.Errorf("request %s: %w at %s and not back: %w", x.subject, ErrConnectionLost, x.lost.Format("15:04:05.000"), ctx.Err())
	case !x.resent.IsZero():
		return fmt.Errorf("request %s: %w, and the request sent again at %s once it was back was not answered in time: %w",
			x.subject, ErrConnectionLost, x.resent.Format("15:04:05.000"), ctx.Err())
	}
	return fmt.Errorf("request %s: %w", x.subject, ctx.Err())
}

// chunks returns the body of the reply whose first message is d, joined
// with its other chunks. It returns errReconnected when the connection
// was lost while chunks were pushed: the request was sent again.
func (x *exchange) chunks(ctx context.Context, nc *nats.Conn, status <-chan nats.Status, d delivery) ([]byte, error) {
	reply, err := checkReply(d.m, d.s.subject)
	if err != nil {
		return nil, err
	}
	n, _ := strconv.Atoi(reply.Header.Get(headerChunks))
	if n <= 1 {
		return reply.Data, nil
	}
	total, _ := strconv.Atoi(reply.Header.Get(headerReplyBytes))
	var b bytes.Buffer
	b.Grow(total)
	b.Write(reply.Data)
	prefix := reply.Header.Get(headerChunkSubject)
	chunkCtx := ctx
	if x.chunkTimeout > 0 {
		// Past ctx's deadline, but not past its cancellation.
		c, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		defer context.AfterFunc(ctx, func() {
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				cancel()
			}
		})()
		chunkCtx = c
	}
	for k := 1; k < n; k++ {
		cctx, cancel := chunkCtx, context.CancelFunc(func() {})
		if x.chunkTimeout > 0 {
			cctx, cancel = context.WithTimeout(chunkCtx, x.chunkTimeout)
		}
		var part *nats.Msg
		if prefix != "" {
			part, err = request(cctx, nc, nats.NewMsg(prefix+"."+strconv.Itoa(k)))
		} else if part, err = x.next(cctx, nc, status, d.s); err == nil && part.Header.Get(headerChunk) != strconv.Itoa(k) {
			err = fmt.Errorf("got chunk %q", part.Header.Get(headerChunk))
		}
		cancel()
		if errors.Is(err, errReconnected) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("chunk %d of %d: %w", k+1, n, err)
		}
		b.Write(part.Data)
	}
	if total > 0 && b.Len() != total {
		return nil, fmt.Errorf("chunked reply: got %d bytes, expected %d", b.Len(), total)
	}
	return b.Bytes(), nil
}

// next returns the next pushed chunk to s's inbox. When the connection
// is lost meanwhile it waits until it is back, sends the request again
// and returns errReconnected: chunks pushed meanwhile went with the old
// connection.
func (x *exchange) next(ctx context.Context, nc *nats.Conn, status <-chan nats.Status, s *send) (*nats.Msg, error) {
	for {
		select {
		case d := <-x.in:
			if d.s != s {
				continue
			}
			return checkReply(d.m, s.subject)
		case st := <-status:
			sent, err := x.status(nc, st)
			if err != nil {
				return nil, err
			}
			if sent {
				s.sub.Unsubscribe()
				s.sub = nil
				return nil, errReconnected
			}
		case <-ctx.Done():
			return nil, x.expired(ctx)
		}
	}
}

// checkReply returns a reply to a request on subj, or the error it
// carries.
func checkReply(reply *nats.Msg, subj string) (*nats.Msg, error) {
	if len(reply.Data) == 0 && reply.Header.Get("Status") == "503" {
		return nil, fmt.Errorf("%w on %s", ErrNoService, subj)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &Error{Code: code, Description: reply.Header.Get(micro.ErrorHeader)}
	}
	return reply, nil
}

func request(ctx context.Context, nc *nats.Conn, msg *nats.Msg) (*nats.Msg, error) {
	reply, err := nc.RequestMsgWithContext(ctx, msg)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w on %s", ErrNoService, msg.Subject)
	}
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", msg.Subject, err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &Error{Code: code, Description: reply.Header.Get(micro.ErrorHeader)}
	}
	return reply, nil
}
