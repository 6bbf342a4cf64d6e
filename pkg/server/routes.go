package server

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/ctxd/ctxd/pkg/subject"
)

// On a partitioned stream the instance that applies partition k answers
// ctxd.p.<k>.<session> as well as ctxd.context.<session>: it subscribes
// there while it holds the partition (Route), and nobody else does. A
// client that knows the number of partitions (pkg/client) asks there
// first, and falls back to ctxd.context.<session> on "no responders": a
// partition no instance holds (idle, or moving) answers at once that
// nobody is there. Either way the answer is right: any instance answers
// any session, the owner from memory, the others through the stream.
//
// These are plain subscriptions, not micro endpoints, because micro
// cannot remove one endpoint; they share the queue group ctxd, so that
// two instances that both think they hold a partition answer each
// request once. Their requests count in the context endpoint's stats.

// routes are the partition endpoints of a service.
type routes struct {
	mu     sync.Mutex
	want   map[int]bool
	subs   map[int]*nats.Subscription
	open   bool // the service serves: wanted routes are subscribed
	closed bool
	// flush waits for the server to hold the subscriptions; nil is the
	// connection's FlushTimeout(routesFlush).
	flush func() error
}

// routesFlush bounds how long Open waits for the server to confirm the
// partition endpoints wanted before it.
const routesFlush = 10 * time.Second

// Route starts (on) or stops serving ctxd.p.<k>.* . Before Open it is
// remembered and applied by Open; after Close it does nothing.
func (s *Service) Route(k int, on bool) {
	rt := &s.routes
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return
	}
	if rt.want == nil {
		rt.want, rt.subs = map[int]bool{}, map[int]*nats.Subscription{}
	}
	if on {
		rt.want[k] = true
	} else {
		delete(rt.want, k)
	}
	if !rt.open {
		return
	}
	if err := s.applyRoute(k, on); err != nil {
		s.log("partition endpoint", "partition", k, "err", err)
	}
}

// applyRoute subscribes or unsubscribes one partition's endpoint;
// routes.mu is held.
func (s *Service) applyRoute(k int, on bool) error {
	rt := &s.routes
	sub := rt.subs[k]
	switch {
	case on && sub == nil:
		sub, err := s.nc.QueueSubscribe(subject.PartitionPrefix+strconv.Itoa(k)+".*", s.QueueGroup, s.handlePartition)
		if err != nil {
			return err
		}
		rt.subs[k] = sub
	case !on && sub != nil:
		// Drained, not dropped: the requests already delivered to it are
		// answered (correctly: routing decides only who answers).
		delete(rt.subs, k)
		return sub.Drain()
	}
	return nil
}

// openRoutes subscribes the routes wanted before Open, and waits for
// the server to hold them with routes.mu let go: a route turned on or
// off meanwhile does not wait behind the round trip.
func (s *Service) openRoutes() error {
	rt := &s.routes
	rt.mu.Lock()
	rt.open, rt.closed = true, false
	if rt.want == nil {
		rt.want, rt.subs = map[int]bool{}, map[int]*nats.Subscription{}
	}
	for k := range rt.want {
		if err := s.applyRoute(k, true); err != nil {
			rt.mu.Unlock()
			return err
		}
	}
	flush := rt.flush
	rt.mu.Unlock()
	if flush != nil {
		return flush()
	}
	return s.nc.FlushTimeout(routesFlush)
}

// closeRoutes stops every partition endpoint; the requests already
// delivered are answered.
func (s *Service) closeRoutes() {
	rt := &s.routes
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.closed, rt.open = true, false
	for k, sub := range rt.subs {
		sub.Drain()
		delete(rt.subs, k)
	}
}

// handlePartition answers a request on ctxd.p.<k>.<session>.
func (s *Service) handlePartition(m *nats.Msg) {
	if !s.replyAllowed(m.Subject, m.Reply) {
		return
	}
	r := s.observe(plainRequest{m}, "context", time.Now())
	rest := strings.TrimPrefix(m.Subject, subject.PartitionPrefix)
	_, session, ok := strings.Cut(rest, ".")
	if !ok {
		s.fail(r, fmt.Errorf("%w: subject %q", subject.ErrBadSession, m.Subject))
		return
	}
	s.handleSession(r, session)
}

// plainRequest is a request that came on a plain subscription, answered
// as micro answers its own.
type plainRequest struct{ m *nats.Msg }

func (p plainRequest) Respond(data []byte, opts ...micro.RespondOpt) error {
	r := &nats.Msg{Data: data}
	for _, o := range opts {
		o(r)
	}
	return p.m.RespondMsg(r)
}

func (p plainRequest) RespondJSON(v any, opts ...micro.RespondOpt) error {
	data, err := json.Marshal(v)
	if err != nil {
		return p.Error("500", "cannot encode the reply", nil)
	}
	return p.Respond(data, opts...)
}

func (p plainRequest) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	r := &nats.Msg{Data: data, Header: nats.Header{
		micro.ErrorHeader:     []string{description},
		micro.ErrorCodeHeader: []string{code},
	}}
	for _, o := range opts {
		o(r)
	}
	return p.m.RespondMsg(r)
}

func (p plainRequest) Data() []byte           { return p.m.Data }
func (p plainRequest) Headers() micro.Headers { return micro.Headers(p.m.Header) }
func (p plainRequest) Subject() string        { return p.m.Subject }
func (p plainRequest) Reply() string          { return p.m.Reply }
