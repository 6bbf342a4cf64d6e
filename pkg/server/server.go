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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"golang.org/x/time/rate"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/render"
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

// Viewer shows a session's projection: View calls fn with it under its
// lock, loading it when it is not cached, or with nil for a session
// without records.
type Viewer interface {
	View(ctx context.Context, session string, fn func(p *projection.Session)) error
}

// Reacher is Projections whose waits are the session's: an instance that
// does not apply every record as it is stored proves, per request, that
// the session's projection holds every record up to the min_seq asked.
// When the Projections is one, the service uses it in place of Wait.
type Reacher interface {
	// Ready reports whether a request for the session with min_seq seq is
	// answered at once from memory, with no wait and no read of the
	// stream: it is then answered on the endpoint's goroutine.
	Ready(session string, seq uint64) bool
	// Reach returns once the session's projection holds every record of
	// the session with a stream sequence up to seq, with the Viewer that
	// shows it (or a later state); or an error wrapping
	// store.ErrWaitExpired after timeout.
	Reach(ctx context.Context, session string, seq uint64, timeout time.Duration) (Viewer, error)
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
	// Version is the version $SRV.INFO reports; New sets Version.
	Version string
	// Observe, when set, is told of every answer (see Observer).
	Observe Observer
	// ChunkHoldBytes bounds the bytes of chunked replies held for their
	// clients to fetch (chunks.go); Open raises it to MaxReplyBytes.
	ChunkHoldBytes int
	// PushBytes is the largest reply pushed to a client that asks for
	// pushed chunks; a larger one is held for it to fetch (chunks.go).
	PushBytes int
	// MaxReplyBytes is the largest reply sent in chunks; a larger one is
	// refused with an error that says so. 0: a requester's share of
	// ChunkHoldBytes.
	MaxReplyBytes int
	// LargeReplyBytes: replies of at least this many bytes go out on a
	// connection of their own, off the endpoint's goroutine (bulk.go); 0
	// sends every reply on the service's connection. LargeQueueBytes
	// bounds the bytes of those waiting to be sent.
	LargeReplyBytes int
	LargeQueueBytes int64
	// MaxLoads and LoadQueue size the lane of requests for sessions not
	// in the cache (see dispatch.go): MaxLoads at once, LoadQueue more
	// queued, and past that a 503.
	MaxLoads  int
	LoadQueue int
	// MissRate paces the load lane's answers for sessions found without
	// records (dispatch.go): at most MissRate a second, MissBurst at
	// once; up to LoadQueue more wait for the pace, and past that they
	// are refused with 503. 0: not paced.
	MissRate  float64
	MissBurst int
	// MaxWaiters bounds the requests waiting for min_seq at once; past it
	// a request that would wait is refused with 503. 0: no bound.
	MaxWaiters int
	// Instance names this instance in $SRV.STATS and in the
	// Ctxd-Instance header of ctxd.rejected: each instance counts and
	// lists what it saw.
	Instance string
	// CloseGrace is how long Close lets requests in hand go on before it
	// ends their waits (a min_seq not reached is then a 504): those that
	// only need a read of the stream finish instead of failing. 0 ends
	// them at once.
	CloseGrace time.Duration
	// Role, when set, says what the instance does now ("ingest": it
	// applies every record; "reader": it reads each session's tail per
	// request), for $SRV.STATS.
	Role func() string
	// Stream names the stream the instance serves, for $SRV.INFO and
	// $SRV.PING (ctxd partition finds the instances of a stream with it).
	Stream string
	// Partitions is the stream's number of partitions, for $SRV.INFO
	// (clients compute a session's partition with it) and $SRV.PING
	// (instances count the live ones with it); 0 or 1: none.
	Partitions int
	// Owned, when set, lists the partitions this instance applies now,
	// for $SRV.STATS.
	Owned func() []int
	// DigestBytes bounds the chains of message arrays kept to answer
	// with deltas (delta.go); past it the least recently asked go.
	DigestBytes int64

	routes routes // the partition endpoints served (routes.go)
	nc     *nats.Conn
	proj   Projections

	svc    micro.Service
	ctx    context.Context // cancelled by Close: ends every wait
	cancel context.CancelFunc
	wg     sync.WaitGroup // requests waiting for min_seq, load workers

	largeNC *nats.Conn // large replies go out on it
	large   sender
	loads   lane          // requests that load their session
	misses  *rate.Limiter // paces the lane's answers of no records
	delayed atomic.Int64  // answers of no records waiting for the pace
	waiting atomic.Int64  // requests waiting for min_seq
	// refusedReplies counts the requests dropped for their reply subject
	// (replyAllowed).
	refusedReplies atomic.Int64

	chunks      chunked // replies larger than the max payload
	chunkPrefix string  // ctxd.chunk.<instance id>
	rendered    renderCache
	epStats     [3]endpointStats // context, chunk, rejected
	digests     digests          // the chains of replies' arrays (delta.go)

	// closing is set by Close. Stopping the endpoints drains them in the
	// background, so requests already queued still reach the handler
	// after Close has begun; they must not start a wait Close can't see.
	mu      sync.Mutex
	closing bool
}

// New returns a service over the projections, with the defaults.
func New(nc *nats.Conn, proj Projections) *Service {
	return &Service{
		Name: "ctxd", QueueGroup: "ctxd", nc: nc, proj: proj,
		RenderCacheBytes: DefaultRenderCacheBytes,
		Version:          Version,
		MaxLoads:         DefaultMaxLoads,
		LoadQueue:        DefaultLoadQueue,
		MissRate:         DefaultMissRate,
		MissBurst:        DefaultMissBurst,
		MaxWaiters:       DefaultMaxWaiters,
		ChunkHoldBytes:   DefaultChunkHoldBytes,
		PushBytes:        DefaultPushBytes,
		MaxReplyBytes:    DefaultMaxReplyBytes,
		LargeReplyBytes:  DefaultLargeReplyBytes,
		LargeQueueBytes:  DefaultLargeQueueBytes,
		DigestBytes:      DefaultDigestBytes,
	}
}

// Open registers the service and its endpoints.
func (s *Service) Open() error {
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.closing = false
	s.rendered.max = s.RenderCacheBytes
	s.rendered.digest = s.renderedDigest
	s.digests.max = s.DigestBytes
	s.chunks.max, s.chunks.one = max(s.ChunkHoldBytes, s.MaxReplyBytes), s.MaxReplyBytes
	if err := s.openLarge(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	workers := max(1, s.MaxLoads)
	s.wg.Add(workers)
	s.misses = nil
	if s.MissRate > 0 {
		s.misses = rate.NewLimiter(rate.Limit(s.MissRate), max(1, s.MissBurst))
	}
	s.loads.start(workers, max(0, s.LoadQueue), func(j job) { s.answer(j.r, j.session, j.req, 0, true) }, s.wg.Done)
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:         s.Name,
		Version:      s.Version,
		Description:  "model context of agent transcripts: request ctxd.context.<session>",
		QueueGroup:   s.QueueGroup,
		StatsHandler: s.endpointData,
		Metadata:     s.metadata(),
	})
	if err != nil {
		s.stopLanes()
		s.closeLarge()
		return fmt.Errorf("server: %w", err)
	}
	err = svc.AddEndpoint("context", micro.HandlerFunc(s.handleContext),
		micro.WithEndpointSubject(subject.ContextPrefix+"*"),
		micro.WithEndpointMetadata(map[string]string{
			"description": "model context of a session; body: optional {min_seq, wait_ms, format, budget_tokens, edits}",
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
		s.stopLanes()
		s.closeLarge()
		return fmt.Errorf("server: %w", err)
	}
	s.svc = svc
	if err := s.openRoutes(); err != nil {
		s.log("partition endpoints", "err", err)
	}
	return nil
}

// closeFlush bounds how long Close waits for the server to confirm that
// the endpoints are gone.
const closeFlush = 2 * time.Second

// Close stops taking requests (the server confirms it, so none is sent
// here after Close returns), lets the ones in hand go on for up to
// CloseGrace, then ends their waits (a waiting request is answered 504),
// and waits for them.
func (s *Service) Close() error {
	if s.svc == nil {
		return nil
	}
	s.closeRoutes()
	err := s.svc.Stop()
	// The endpoints' unsubscriptions confirmed by the server (unless the
	// connection is down): the next request goes to another instance, or
	// finds no responder, at once instead of being sent here and waiting
	// out its timeout.
	if ferr := s.nc.FlushTimeout(closeFlush); ferr != nil && !errors.Is(ferr, nats.ErrConnectionClosed) {
		s.log("endpoints: unsubscribe not confirmed", "err", ferr)
	}
	s.mu.Lock()
	s.closing = true // from here on no wait is added to wg, no job queued
	s.loads.stop()
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	if s.CloseGrace > 0 {
		t := time.NewTimer(s.CloseGrace)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
	}
	s.cancel()
	<-done
	s.closeLarge()
	s.svc = nil
	return err
}

// stopLanes lets the load workers finish what is queued and waits for
// them and for the waiting requests.
func (s *Service) stopLanes() {
	s.mu.Lock()
	s.closing = true // from here on no wait is added to wg, no job queued
	s.loads.stop()
	s.mu.Unlock()
	s.wg.Wait()
}

// InstanceHeader names the instance that answered ctxd.rejected.
const InstanceHeader = protocol.HeaderInstance

func (s *Service) metadata() map[string]string {
	md := map[string]string{}
	if s.Instance != "" {
		md["instance"] = s.Instance
	}
	if s.Stream != "" {
		md["stream"] = s.Stream
	}
	if s.Partitions > 1 {
		md["partitions"] = strconv.Itoa(s.Partitions)
	}
	if len(md) == 0 {
		return nil
	}
	return md
}

// ready reports whether a request is answered at once.
func (s *Service) ready(session string, seq uint64) bool {
	if rc, ok := s.proj.(Reacher); ok {
		return rc.Ready(session, seq)
	}
	return seq == 0 || s.proj.Wait(s.ctx, seq, 0) == nil
}

// reach waits until the session holds every record up to seq.
func (s *Service) reach(session string, seq uint64, timeout time.Duration) (Viewer, error) {
	if rc, ok := s.proj.(Reacher); ok {
		return rc.Reach(s.ctx, session, seq, timeout)
	}
	if seq == 0 {
		return s.proj, nil
	}
	return s.proj, s.proj.Wait(s.ctx, seq, timeout)
}

// answer replies once the session holds every record up to the
// request's min_seq, waiting at most wait, and within the request's
// deadline when it has one (within.go).
// An answer of no records is paced when paced is set (see pace).
func (s *Service) answer(r micro.Request, session string, req contextRequest, wait time.Duration, paced bool) {
	defer req.release()
	if req.expired() {
		return // answered at its deadline while it was queued
	}
	v, err := s.reach(session, req.minSeq, wait)
	if err != nil {
		if req.claim() {
			s.fail(r, s.why(err))
		}
		return
	}
	if req.expired() {
		return // answered at its deadline: nobody waits for the view
	}
	s.reply(r, v, session, req, paced) // claims once the reply is built
}

// why is the error a request failed with: a canceled wait is the
// service shutting down, and a read of the stream or its buckets that
// timed out by its own bound is errStreamTimeout: the stream did not
// answer (a leader election), not a fault of ctxd's.
func (s *Service) why(err error) error {
	switch {
	case s.ctx.Err() != nil && errors.Is(err, context.Canceled):
		return fmt.Errorf("%w: shutting down", store.ErrWaitExpired)
	case errors.Is(err, store.ErrWaitExpired):
		return err
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("%w: %w", errStreamTimeout, err)
	}
	return err
}

func (s *Service) handleContext(r micro.Request) {
	if !s.replyAllowed(r.Subject(), r.Reply()) {
		return
	}
	s.handleSession(s.observe(r, "context", time.Now()), strings.TrimPrefix(r.Subject(), subject.ContextPrefix))
}

// handleSession answers a context request for session, however it came.
func (s *Service) handleSession(r micro.Request, session string) {
	if err := subject.CheckSession(session); err != nil {
		s.fail(r, err)
		return
	}
	req, err := parseRequest(r.Data(), r.Headers().Get("Accept"))
	if err != nil {
		s.fail(r, err)
		return
	}
	if req.timeout > 0 {
		req.deadline = time.Now().Add(req.timeout) // from when it was received
	}
	if s.ready(session, req.minSeq) {
		s.dispatch(r, session, req) // the common case: no wait
		return
	}
	if req.minSeq == 0 {
		// Nothing to wait for, but not answered from memory: an
		// instance that reads the session's tail, or whose reads raised
		// its floor. Off the endpoint's goroutine, on the load lane.
		s.toLane(r, session, req)
		return
	}
	s.await(r, session, req)
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

// reply answers a request from the session's projection; an answer of no
// records is paced when paced is set (see pace).
func (s *Service) reply(r micro.Request, v Viewer, session string, req contextRequest, paced bool) {
	var empty bool
	var out []byte
	var buf *[]byte       // the reply's buffer, from replyBuffers
	var made *cachedReply // a rendered reply made here, kept with the session
	var err error
	verr := v.View(s.ctx, session, func(p *projection.Session) {
		if req.digest && !req.rendered() && req.edits == nil && p != nil {
			buf = replyBuffers.Get().(*[]byte)
			out, err = s.digestedNeutral(*buf, session, p, req)
			return
		}
		if req.digest {
			// A reply in a provider format is made with its digest
			// (digestIn): a whole one is sent as it is kept.
			has := digestIn(req) && p != nil
			defer func() {
				if err != nil || has && req.have == nil {
					return // a whole reply in a provider format is made with it
				}
				if buf != nil { // out is in it
					out, _, err = s.digested(nil, out, session, p, req, made, has)
					return
				}
				buf = replyBuffers.Get().(*[]byte)
				var own bool
				if out, own, err = s.digested(*buf, out, session, p, req, made, has); !own {
					// The reply as kept: never to be written.
					replyBuffers.Put(buf)
					buf = nil
				}
			}()
		}
		empty = p == nil
		switch {
		case req.edits != nil:
			// Edited on request, whole each time: the cached replies
			// and their render states are of the unedited context.
			if req.msgpack {
				out, err = appendEditedMsgpack(nil, session, p, req, s.BrowserTools)
			} else {
				out, err = appendEditedJSON(nil, session, p, req, s.BrowserTools)
			}
		case req.rendered():
			// Rendered on request, kept until the session changes.
			var prev int
			if out, prev = s.rendered.get(p, req); out != nil {
				return
			}
			var dst []byte // provider formats: the cache's (see renderCache.state)
			if req.format == render.Neutral {
				dst = s.rendered.buffer(prev)
			}
			if req.msgpack {
				out, made, err = s.rendered.appendMsgpack(dst, session, p, req, s.BrowserTools)
			} else {
				out, made, err = s.rendered.appendJSON(dst, session, p, req, s.BrowserTools)
			}
			if err == nil && made == nil {
				made = s.rendered.put(p, req, out) // the reply alone, or a neutral one
			}
		case req.msgpack:
			buf = replyBuffers.Get().(*[]byte)
			out, err = appendReplyMsgpack((*buf)[:0], session, p)
		default:
			buf = replyBuffers.Get().(*[]byte)
			out = appendReplyJSON((*buf)[:0], session, p)
		}
	})
	if verr != nil {
		err = s.why(verr)
	}
	// The reply is built (the session loaded, if it had to be): the
	// request's deadline may have answered it meanwhile.
	if !req.claim() {
		if buf != nil {
			*buf = out
			replyBuffers.Put(buf)
		}
		return
	}
	if err != nil {
		s.fail(r, err)
		return
	}
	send := func(r micro.Request) {
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
		// Respond has copied out: once the session's next reply
		// replaces it, its buffer may serve another.
		s.rendered.sent(made)
		if buf != nil {
			// Respond has copied out to the connection's buffer.
			*buf = out
			replyBuffers.Put(buf)
		}
	}
	if empty && paced {
		s.pace(r, send)
		return
	}
	if !s.sendLarge(r, len(out), send) {
		send(r)
	}
}

// replyBuffers hold reply buffers between requests: a reply is as large
// as its context, and a new buffer for every request would cost more
// than the copy into it (allocating it zeroes it, and collecting it later
// costs again).
var replyBuffers = sync.Pool{New: func() any { return new([]byte) }}

func (s *Service) handleRejected(r micro.Request) {
	if !s.replyAllowed(r.Subject(), r.Reply()) {
		return
	}
	r = s.observe(r, "rejected", time.Now())
	data, err := json.Marshal(s.proj.Rejected())
	if err != nil {
		s.fail(r, err)
		return
	}
	var opts []micro.RespondOpt
	if s.Instance != "" {
		opts = append(opts, micro.WithHeaders(micro.Headers{InstanceHeader: []string{s.Instance}}))
	}
	if err := r.Respond(data, opts...); err != nil {
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
