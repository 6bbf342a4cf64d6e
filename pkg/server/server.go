// Package server is ctxd's request-reply service: the NATS service named
// ctxd (nats.go micro), with the endpoint ctxd.context.<session> that
// answers a session's model context, and ctxd.rejected that lists the
// records the projections skipped.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Version is the service version $SRV.INFO reports.
const Version = "0.1.0"

// Projections is what the service reads: the live projections.
type Projections interface {
	// Wait returns once every stream sequence up to seq is applied, or an
	// error wrapping store.ErrWaitExpired after timeout.
	Wait(ctx context.Context, seq uint64, timeout time.Duration) error
	// View calls fn with a session's projection under its lock, loading
	// it when it is not cached, or with nil for a session without records.
	View(ctx context.Context, session string, fn func(p *projection.Session)) error
	// Rejected lists the records the projections skipped.
	Rejected() []store.Rejection
	// Stats returns counters for $SRV.STATS.
	Stats() store.Stats
}

// Service is the ctxd NATS service.
type Service struct {
	// Name of the service, for $SRV discovery.
	Name string
	// QueueGroup the endpoints subscribe in; instances share requests.
	QueueGroup string
	// Logger receives errors; nil discards them.
	Logger *slog.Logger
	// BrowserTools are the projections' browser tools, which place
	// Anthropic's cache breakpoint; nil means the default.
	BrowserTools []string
	// RenderCacheBytes bounds the rendered replies kept, one per session
	// (see renderCache); 0 keeps none.
	RenderCacheBytes int

	nc   *nats.Conn
	proj Projections

	svc    micro.Service
	ctx    context.Context // cancelled by Close: ends every wait
	cancel context.CancelFunc
	wg     sync.WaitGroup // requests waiting for min_seq

	chunks      chunked // replies larger than the max payload
	chunkPrefix string  // ctxd.chunk.<instance id>
	rendered    renderCache

	// closing is set by Close. Stopping the endpoints drains them in the
	// background, so requests already queued still reach the handler
	// after Close has begun; they must not start a wait Close can't see.
	mu      sync.Mutex
	closing bool
}

// New returns a service over the projections, with the defaults.
func New(nc *nats.Conn, proj Projections) *Service {
	return &Service{Name: "ctxd", QueueGroup: "ctxd", nc: nc, proj: proj, RenderCacheBytes: DefaultRenderCacheBytes}
}

// Open registers the service and its endpoints.
func (s *Service) Open() error {
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.closing = false
	s.rendered.max = s.RenderCacheBytes
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        s.Name,
		Version:     Version,
		Description: "model context of agent transcripts: request ctxd.context.<session>",
		QueueGroup:  s.QueueGroup,
		StatsHandler: func(*micro.Endpoint) any {
			return s.proj.Stats()
		},
	})
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	err = svc.AddEndpoint("context", micro.HandlerFunc(s.handleContext),
		micro.WithEndpointSubject(subject.ContextPrefix+"*"),
		micro.WithEndpointMetadata(map[string]string{
			"description": "model context of a session; body: optional {min_seq, wait_ms, format, budget_tokens}",
		}))
	if err == nil {
		// Chunks of a large reply are held by the instance that made it.
		s.chunkPrefix = "ctxd.chunk." + svc.Info().ID
		err = svc.AddEndpoint("chunk", micro.HandlerFunc(s.handleChunk),
			micro.WithEndpointSubject(s.chunkPrefix+".>"),
			micro.WithEndpointQueueGroupDisabled(),
			micro.WithEndpointMetadata(map[string]string{
				"description": "the further chunks of a context reply larger than the max payload",
			}))
	}
	if err == nil {
		err = svc.AddEndpoint("rejected", micro.HandlerFunc(s.handleRejected),
			micro.WithEndpointSubject("ctxd.rejected"),
			micro.WithEndpointMetadata(map[string]string{
				"description": "records the projections skipped, oldest first",
			}))
	}
	if err == nil {
		// The server must hold the endpoints' subscriptions before Open
		// says the service serves: a request sent right after must find a
		// responder.
		err = s.nc.FlushTimeout(10 * time.Second)
	}
	if err != nil {
		svc.Stop()
		return fmt.Errorf("server: %w", err)
	}
	s.svc = svc
	return nil
}

// Close stops taking requests, lets the ones in hand finish (a waiting
// request is answered 504), and waits for them.
func (s *Service) Close() error {
	if s.svc == nil {
		return nil
	}
	err := s.svc.Stop()
	s.cancel()
	s.mu.Lock()
	s.closing = true // from here on no wait is added to wg
	s.mu.Unlock()
	s.wg.Wait()
	s.svc = nil
	return err
}

func (s *Service) handleContext(r micro.Request) {
	session := strings.TrimPrefix(r.Subject(), subject.ContextPrefix)
	if err := subject.CheckSession(session); err != nil {
		s.fail(r, err)
		return
	}
	req, err := parseRequest(r.Data(), r.Headers().Get("Accept"))
	if err != nil {
		s.fail(r, err)
		return
	}
	if req.minSeq == 0 || s.proj.Wait(s.ctx, req.minSeq, 0) == nil {
		s.reply(r, session, req) // the common case: no wait, no goroutine
		return
	}
	if !s.track() {
		s.fail(r, fmt.Errorf("%w: shutting down", store.ErrWaitExpired))
		return
	}
	// Wait off the endpoint's goroutine, so a waiting request never delays
	// another.
	r = detached{Request: r, nc: s.nc}
	go func() {
		defer s.wg.Done()
		if err := s.proj.Wait(s.ctx, req.minSeq, req.wait); err != nil {
			if errors.Is(err, context.Canceled) {
				err = fmt.Errorf("%w: shutting down", store.ErrWaitExpired)
			}
			s.fail(r, err)
			return
		}
		s.reply(r, session, req)
	}()
}

// track counts a waiting request in wg, unless Close has begun.
func (s *Service) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	return true
}

func (s *Service) reply(r micro.Request, session string, req contextRequest) {
	var out []byte
	var buf *[]byte // the msgpack reply's buffer, from replyBuffers
	var err error
	verr := s.proj.View(s.ctx, session, func(p *projection.Session) {
		switch {
		case req.rendered():
			// Rendered on request, kept until the session changes.
			var prev int
			if out, prev = s.rendered.get(session, p, req); out != nil {
				return
			}
			dst := make([]byte, 0, sizeHint(prev))
			if req.msgpack {
				out, err = appendRenderedMsgpack(dst, session, p, req, s.BrowserTools)
			} else {
				out, err = s.rendered.appendJSON(dst, session, p, req, s.BrowserTools)
			}
			if err == nil {
				s.rendered.put(session, p, req, out)
			}
		case req.msgpack:
			buf = replyBuffers.Get().(*[]byte)
			out, err = appendReplyMsgpack((*buf)[:0], session, p)
		default:
			out = replyJSON(session, p)
		}
	})
	if verr != nil {
		err = verr
	}
	if err != nil {
		s.fail(r, err)
		return
	}
	if max := s.nc.MaxPayload(); max > 0 && int64(len(out)) > max-chunkHeaderRoom {
		// The chunks are served from out for a while: it is not reused.
		if err := s.respondChunked(r, out, max); err != nil {
			s.fail(r, fmt.Errorf("%w: %d bytes: %w", errTooLarge, len(out), err))
		}
		return
	}
	if err := r.Respond(out); err != nil {
		s.log("respond", "session", session, "err", err)
	}
	if buf != nil {
		// Respond has copied out to the connection's buffer.
		*buf = out
		replyBuffers.Put(buf)
	}
}

// detached answers a request after its handler has returned. micro keeps
// per-request state for its statistics, which the endpoint's goroutine
// reads once the handler returns; answering through it from another
// goroutine would race with that read. So a late answer goes out on the
// connection directly, as micro would send it.
type detached struct {
	micro.Request
	nc *nats.Conn
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

// replyBuffers hold msgpack reply buffers between requests: a reply is as
// large as its context, and a new buffer for every request would cost
// more than the copy into it (allocating it zeroes it, and collecting it
// later costs again). A JSON reply needs none: the session keeps it.
var replyBuffers = sync.Pool{New: func() any { return new([]byte) }}

func (s *Service) handleRejected(r micro.Request) {
	data, err := json.Marshal(s.proj.Rejected())
	if err != nil {
		s.fail(r, err)
		return
	}
	if err := r.Respond(data); err != nil {
		s.log("respond", "err", err)
	}
}

func (s *Service) fail(r micro.Request, err error) {
	code, desc := errorReply(err)
	if code == CodeInternal {
		s.log("request failed", "subject", r.Subject(), "err", err)
	}
	if rerr := r.Error(code, desc, nil); rerr != nil {
		s.log("respond", "err", rerr)
	}
}

func (s *Service) log(msg string, args ...any) {
	if s.Logger != nil {
		s.Logger.Warn(msg, args...)
	}
}
