package server

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Large replies.
//
// A NATS connection writes a large message while holding its lock, at
// the pace at which the server takes it, and the server takes it no
// faster than the receiving client reads. On the connection the service
// answers on, sixteen clients fetching a 7 MiB context made every other
// reply, of any size, wait behind theirs: a 200 KiB reply took 600 ms.
//
// So replies of at least LargeReplyBytes go out on a connection of their
// own, opened by Open with the same options, and never from the
// endpoint's goroutine: a request answered there hands its large reply
// to a sender, which writes it. Replies waiting for the sender are
// bounded in bytes (LargeQueueBytes); past that a request is refused with
// 503. The bytes of a JSON reply are those the session keeps, not a copy.

// Defaults of the large replies.
const (
	DefaultLargeReplyBytes = 1 << 20
	DefaultLargeQueueBytes = 512 << 20
)

// errLargeBusy: too many bytes of large replies wait to be sent.
var errLargeBusy = errors.New("too many large replies waiting to be sent")

// largeSend is a large reply waiting for the sender.
type largeSend struct {
	r    micro.Request // detached
	send func(r micro.Request)
	size int
}

// sender writes large replies, one at a time, in order.
type sender struct {
	ch     chan largeSend
	queued atomic.Int64 // bytes in ch
	done   sync.WaitGroup
}

func (s *sender) start() {
	s.ch = make(chan largeSend, 4096)
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		for l := range s.ch {
			l.send(l.r)
			s.queued.Add(-int64(l.size))
		}
	}()
}

// offer queues a reply of size bytes unless max bytes wait already.
func (s *sender) offer(l largeSend, max int64) bool {
	if s.queued.Add(int64(l.size)) > max && s.queued.Load() != int64(l.size) {
		s.queued.Add(-int64(l.size))
		return false
	}
	select {
	case s.ch <- l:
		return true
	default:
		s.queued.Add(-int64(l.size))
		return false
	}
}

func (s *sender) stop() {
	close(s.ch)
	s.done.Wait()
}

// openLarge connects the connection large replies go out on, with the
// options of the service's, without its event handlers: those belong to
// whoever made that connection.
func (s *Service) openLarge() error {
	if s.LargeReplyBytes <= 0 {
		return nil
	}
	opts := s.nc.Opts
	opts.Name += " (large replies)"
	opts.ClosedCB, opts.DisconnectedCB, opts.DisconnectedErrCB = nil, nil, nil
	opts.ConnectedCB, opts.ReconnectedCB, opts.DiscoveredServersCB = nil, nil, nil
	opts.AsyncErrorCB, opts.ReconnectErrCB, opts.LameDuckModeHandler = nil, nil, nil
	if url := s.nc.ConnectedUrl(); url != "" && opts.Url == "" && len(opts.Servers) == 0 {
		opts.Url = url
	}
	nc, err := opts.Connect()
	if err != nil {
		return fmt.Errorf("connect for large replies: %w", err)
	}
	s.largeNC = nc
	s.large.start()
	return nil
}

// closeLarge sends what waits and closes the connection; Close has set
// closing: nothing is queued from here on.
func (s *Service) closeLarge() {
	s.mu.Lock()
	nc := s.largeNC
	s.largeNC = nil
	s.mu.Unlock()
	if nc == nil {
		return
	}
	s.large.stop()
	nc.Flush()
	nc.Close()
}

// sendLarge sends a reply of size bytes with send, on the connection of
// large replies when it is one: handed to the sender when r is answered
// on the endpoint's goroutine, at once otherwise. It returns false when
// the reply is not large; send is then the caller's to call.
func (s *Service) sendLarge(r micro.Request, size int, send func(r micro.Request)) bool {
	if size < s.LargeReplyBytes {
		return false
	}
	s.mu.Lock()
	if s.closing || s.largeNC == nil {
		// Draining after Close: on the service's connection.
		s.mu.Unlock()
		return false
	}
	nc := s.largeNC
	if detachedConn(r) != nil {
		s.mu.Unlock()
		send(detach(r, nc))
		return true
	}
	ok := s.large.offer(largeSend{r: detach(r, nc), send: send, size: size}, s.LargeQueueBytes)
	s.mu.Unlock()
	if !ok {
		s.fail(r, errLargeBusy)
	}
	return true
}

// conn returns the connection a request is answered on.
func (s *Service) conn(r micro.Request) *nats.Conn {
	if nc := detachedConn(r); nc != nil {
		return nc
	}
	return s.nc
}
