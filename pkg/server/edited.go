package server

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// An edited reply (a request with edits, docs/EDITS.md) is the rendered
// reply of the context the edits leave, with "edits" after its other
// fields:
//
//	{"session", "seq", ["format"], <the body's fields>, "dropped", ["render"], "usage", ["budget"], "edits"}
//
// It is built whole on every request and kept nowhere: the session's
// cached replies and render states stay those of the unedited context,
// so a request without edits takes the same path, at the same speed, as
// before edits existed.

// editSession renders the session's context with the request's edits
// applied.
func editSession(p *projection.Session, req contextRequest, browser []string) (rendering, edits.Report) {
	r := rendering{format: req.format, req: req, msgs: []any{}}
	if p != nil {
		r.msgs, r.seqs, r.dropped = p.Messages(), p.MessageSeqs(nil), p.Dropped()
	} else {
		r.dropped = projection.Dropped{UnpairedCalls: []projection.UnpairedCall{}, OrphanResults: []projection.OrphanResult{}}
	}
	opt := render.Options{BrowserTools: browser}
	msgs, seqs, rep := edits.Apply(r.msgs, req.edits, edits.Options{
		Seqs:        r.seqs,
		Budget:      req.budget,
		HasBudget:   req.hasBudget,
		Tokens:      func(m []any) int { return render.Tokens(req.format, m, opt) },
		ValueTokens: func(v any) int { return render.ValueTokens(req.format, v) },
	})
	r.msgs, r.seqs = msgs, seqs
	r.body, r.report = render.Render(r.format, r.msgs, render.Options{Seqs: r.seqs, BrowserTools: browser})
	return r, rep
}

// editedTail is the rendering's tail with the edits' report last.
func editedTail(r rendering, rep edits.Report, jsonBytes int) []record.Member {
	return append(r.tail(jsonBytes), record.Member{Key: "edits", Value: rep.Map()})
}

// appendEditedJSON appends the edited reply as JSON.
func appendEditedJSON(dst []byte, session string, p *projection.Session, req contextRequest, browser []string) ([]byte, error) {
	out, err := editedReply(session, p, req, browser)
	if err != nil {
		return dst, err
	}
	return record.AppendJSON(dst, out)
}

// appendEditedMsgpack appends the edited reply as a msgpack map.
func appendEditedMsgpack(dst []byte, session string, p *projection.Session, req contextRequest, browser []string) ([]byte, error) {
	out, err := editedReply(session, p, req, browser)
	if err != nil {
		return dst, err
	}
	if dst, err = record.AppendMsgpack(dst, out); err != nil {
		return dst, fmt.Errorf("%w: %w", errNotMsgpack, err)
	}
	return dst, nil
}

// editedReply is the edited reply's map: the head, the body's fields,
// the rendering's tail and the edits' report.
func editedReply(session string, p *projection.Session, req contextRequest, browser []string) (*record.Map, error) {
	r, rep := editSession(p, req, browser)
	var seq uint64
	if p != nil {
		seq = p.Seq()
	}
	head := record.NewMap("session", session, "seq", seq)
	if r.format != render.Neutral {
		head.Set("format", string(r.format))
	}
	jsonBytes, err := r.body.JSONLen()
	if err != nil {
		return nil, fmt.Errorf("encode %s body: %w", r.format, err)
	}
	out := record.NewMap()
	out.Members = append(out.Members, head.Members...)
	out.Members = append(out.Members, r.body.Fields.Members...)
	out.Members = append(out.Members, editedTail(r, rep, jsonBytes)...)
	return out, nil
}
