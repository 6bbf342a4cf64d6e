package server

import (
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// detached answers a request after its handler has returned. micro keeps
// per-request state for its statistics, which the endpoint's goroutine
// reads once the handler returns; answering through it from another
// goroutine would race with that read. So a late answer goes out on the
// connection directly, as micro would send it.
type detached struct {
	micro.Request
	nc *nats.Conn
}

// detach returns r ready to be answered after its handler has returned,
// on nc: a detached request, observed as r was (an observed request's
// answer is counted once, whichever goroutine sends it).
func detach(r micro.Request, nc *nats.Conn) micro.Request {
	switch x := r.(type) {
	case *observed:
		o := *x // the handler's copy is not answered after this
		o.Request = detach(x.Request, nc)
		return &o
	case detached:
		x.nc = nc
		return x
	}
	return detached{Request: r, nc: nc}
}

// detachedConn returns the connection a detached request is answered on,
// or nil for a request answered through micro.
func detachedConn(r micro.Request) *nats.Conn {
	switch x := r.(type) {
	case *observed:
		return detachedConn(x.Request)
	case detached:
		return x.nc
	}
	return nil
}

func (d detached) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: d.Reply(), Data: data}
	for _, o := range opts {
		o(m)
	}
	return d.nc.PublishMsg(m)
}

func (d detached) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: d.Reply(), Data: data, Header: nats.Header{
		micro.ErrorHeader:     []string{description},
		micro.ErrorCodeHeader: []string{code},
	}}
	for _, o := range opts {
		o(m)
	}
	return d.nc.PublishMsg(m)
}
