package server

import (
	"time"

	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// Request limits and defaults of the context endpoint: the wire's
// (package protocol).
const (
	DefaultWait    = protocol.DefaultWait
	MaxWait        = protocol.MaxWait
	MaxRequestSize = protocol.MaxRequestSize
	MaxTimeout     = protocol.MaxTimeout
)

// errBadBody is wrapped by every request-body error: a 400.
var errBadBody = protocol.ErrBadRequest

// contextRequest is a parsed request of the context endpoint, as the
// service acts on it.
type contextRequest struct {
	minSeq  uint64
	wait    time.Duration
	msgpack bool          // reply in msgpack
	format  render.Format // never "": no format is render.Neutral
	// budget is budget_tokens; hasBudget says whether the request gave one.
	budget    uint64
	hasBudget bool
	// edits are the context edits asked for (nil: none): such a reply is
	// rendered whole, never cached (edited.go).
	edits *edits.Config
	// timeout is timeout_ms: how long the client waits for the reply (0:
	// it did not say). deadline is when the request was received plus
	// timeout; the service answers by then, with the context or an error.
	timeout  time.Duration
	deadline time.Time
	// bounded holds the request to its deadline off the endpoint's
	// goroutine (within.go); nil without one.
	bounded *bounded
	// digest: the reply carries its digest (unless the request said
	// "digest": false); have, when set, is the reply the client holds
	// (delta.go).
	digest bool
	have   *held
}

// parseRequest reads the optional body (protocol.ParseRequest): a reply
// is msgpack when the body is, or when it is empty and accept asks for
// it; the format's name is checked here.
func parseRequest(body []byte, accept string) (contextRequest, error) {
	req := contextRequest{wait: DefaultWait, format: render.Neutral, digest: true}
	if len(body) == 0 {
		req.msgpack = accept == protocol.AcceptMsgpack
		return req, nil
	}
	if len(body) <= MaxRequestSize {
		req.msgpack = !record.IsJSON(body)
	}
	p, err := protocol.ParseRequest(body)
	if err != nil {
		return req, err
	}
	req.minSeq, req.wait, req.timeout = p.MinSeq, p.Wait(), p.Timeout()
	req.budget, req.hasBudget = p.BudgetTokens, p.HasBudget
	req.edits = p.Edits
	req.digest = !p.NoDigest
	if p.HasHave {
		req.have = &held{seq: p.HaveSeq, digest: p.HaveDigest}
	}
	if p.Format != "" {
		f, err := render.ParseFormat(p.Format)
		if err != nil {
			return req, err
		}
		req.format = f
	}
	return req, nil
}

// rendered reports whether the reply is one rendered on request: a
// format other than neutral, or a budget to answer.
func (r contextRequest) rendered() bool {
	return r.format != render.Neutral || r.hasBudget
}
