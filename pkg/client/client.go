// Package client publishes records to ctxd's stream (Publish) and fetches
// model contexts from a ctxd service (Context): it checks the session id
// before sending, turns service errors into *Error values, and
// reassembles replies larger than the connection's max payload. A
// Keeper keeps each session's last reply and asks for the next as a
// delta against it, returning whole replies.
//
// A request is a read that every instance answers the same, so it may be
// sent more than once: Context sends one that got no answer within its
// hedge (Request.Hedge) once more, to any instance, and takes the first
// answer; Context and Do send a request again when the connection was
// lost while it waited and is back, and name the lost connection
// (ErrConnectionLost) when it is not back in time.
//
// Every reply comes to an inbox of the connection it is given (replies,
// pushed chunks, fetched chunks, $SRV answers): a server that gives each
// user a private inbox prefix (deployments/tenants) needs the connection
// made with it, nats.CustomInboxPrefix("_INBOX_app-a"). CheckInbox tells
// at once whether the server lets the connection receive its replies.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Headers of a chunked reply, as the service sends them.
const (
	headerChunks       = protocol.HeaderChunks
	headerChunkSubject = protocol.HeaderChunkSubject
	headerReplyBytes   = protocol.HeaderReplyBytes
	headerAcceptChunks = protocol.HeaderAcceptChunks
	headerChunk        = protocol.HeaderChunk
)

// Error is an error reply of the service.
type Error struct {
	Code        string // "400", "404", "500", "503", "504"
	Description string
}

func (e *Error) Error() string { return e.Code + " " + e.Description }

// ErrBadRequest is wrapped by the errors of a Request refused before
// anything is sent.
var ErrBadRequest = errors.New("bad context request")

// ErrNoService: nothing answers on the subject.
var ErrNoService = errors.New("no ctxd service answers (is ctxd serve running?)")

// ErrInboxRefused: the server does not let the connection subscribe to
// its inboxes, so no reply can reach it.
var ErrInboxRefused = errors.New("the server refuses this connection's inbox subscription")

// CheckInbox subscribes to an inbox of the connection and reports
// ErrInboxRefused, naming the inbox, when the server refuses it: the
// user may subscribe only to another prefix (connect with
// nats.CustomInboxPrefix), or to none. Without a deadline in ctx it
// waits 10 s for the server at most.
func CheckInbox(ctx context.Context, nc *nats.Conn) error {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", inbox, err)
	}
	defer sub.Unsubscribe()
	// The server answers a subscription it refuses with an error before
	// it answers the flush's ping.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("subscribe %s: %w", inbox, err)
	}
	if last := nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+inbox+`"`) {
		return fmt.Errorf("%w: %s (connect with the inbox prefix the user may subscribe to)", ErrInboxRefused, inbox)
	}
	return nil
}

// Request is a context request.
type Request struct {
	// MinSeq: answer once every record up to this stream sequence is
	// applied (0: no wait).
	MinSeq uint64
	// WaitMS: how long the service may wait for MinSeq; 0 means the
	// service default (2000 ms). A negative one is refused before
	// anything is sent.
	WaitMS int
	// NoWait asks for an answer now or an error 504 (wait_ms 0), whatever
	// WaitMS says.
	NoWait bool
	// Msgpack asks for a msgpack reply instead of JSON.
	Msgpack bool
	// Format asks for the context rendered for a provider: "anthropic",
	// "openai-chat", "openai-responses" or "gemini"; "" (or "neutral") is
	// the neutral context (docs/RENDER.md).
	Format string
	// BudgetTokens, when not 0, asks the reply to say whether the context
	// is over this many input tokens, and where a compaction may cut.
	BudgetTokens uint64
	// Edits, when not nil, asks for the context with these edits applied
	// before rendering (docs/EDITS.md): old tool results cleared, old
	// thinking and images removed. ToolResults needs a TriggerTokens of
	// its own (HasTrigger) or BudgetTokens.
	Edits *edits.Config
	// Digest asks the reply to carry its digest; HaveSeq and HaveDigest,
	// when HaveDigest is set, name the reply the caller holds, and the
	// reply may be a delta against it (docs/PROTOCOL.md, "Delta
	// replies"). Context returns the reply as it comes: Keeper applies
	// deltas.
	Digest     bool
	HaveSeq    uint64
	HaveDigest string
	// Partitions, the stream's number of partitions (Partitions), sends
	// the request to the instance that applies the session's partition,
	// on ctxd.p.<k>.<session>, and to ctxd.context.<session> when no
	// instance holds it; 0 or 1 sends it to ctxd.context.<session>.
	Partitions int
	// ChunkTimeout, when set, lets a reply in chunks take longer than
	// ctx's deadline, as long as it comes: once the first chunk arrived,
	// each next one is waited for at most ChunkTimeout (ctx's
	// cancellation still ends the wait). A context of hundreds of MiB
	// takes seconds to arrive, which a deadline chosen for the answer
	// cannot foresee.
	ChunkTimeout time.Duration
	// Hedge is how long the request waits for an answer before it is
	// sent once more, from an inbox of its own, to
	// ctxd.context.<session>, where the queue group picks an instance,
	// maybe another one: an instance that stalled, or a reply lost on
	// its way, then costs the request Hedge instead of its deadline.
	// Every instance answers a request the same (a reply is Build of the
	// session up to its seq, at or past min_seq), so the first answer
	// wins and the other is dropped; the chunks of a large reply all
	// come from the instance that answered first. 0 means a quarter of
	// the time left before ctx's deadline, at least 200 ms and at most
	// 1 s (1 s without a deadline): above the service's p99 under load,
	// below the deadlines requests are given. A negative Hedge never
	// sends the request twice. With Partitions and a deadline,
	// ctxd.context.<session> is asked at the hedge or once half the time
	// left has passed, whichever comes first (without hedges the owner
	// is told it has that half).
	Hedge time.Duration
}

// Bounds of the default Request.Hedge.
const (
	minHedge = 200 * time.Millisecond
	maxHedge = time.Second
)

// hedgeAfter returns how long a request sent under ctx waits before its
// hedge, 0 for none.
func hedgeAfter(ctx context.Context, hedge time.Duration) time.Duration {
	if hedge != 0 {
		return max(hedge, 0)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return maxHedge
	}
	return min(max(time.Until(deadline)/4, minHedge), maxHedge)
}

// Partitions asks the service for the stream's number of partitions
// ($SRV.INFO metadata), 1 when it has none: the first instance to answer
// says.
func Partitions(ctx context.Context, nc *nats.Conn) (int, error) {
	reply, err := nc.RequestWithContext(ctx, "$SRV.INFO.ctxd", nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, ErrNoService
	}
	if err != nil {
		return 0, fmt.Errorf("$SRV.INFO.ctxd: %w", err)
	}
	var info struct {
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(reply.Data, &info); err != nil {
		return 0, fmt.Errorf("$SRV.INFO.ctxd: %w", err)
	}
	p, err := strconv.Atoi(info.Metadata["partitions"])
	if err != nil || p < 1 {
		return 1, nil
	}
	return p, nil
}

// Instance is a ctxd instance that answered $SRV.PING.
type Instance struct {
	// ID is the service's id; Name its instance name (host:pid unless
	// set); Stream the stream it serves ("" for a ctxd that does not say).
	ID, Name, Stream string
}

// Instances lists the ctxd instances that answer $SRV.PING.ctxd within
// wait: every one the connection's account reaches.
func Instances(ctx context.Context, nc *nats.Conn, wait time.Duration) ([]Instance, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("$SRV.PING.ctxd: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.PING.ctxd", inbox, nil); err != nil {
		return nil, fmt.Errorf("$SRV.PING.ctxd: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var out []Instance
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, nats.ErrNoResponders) {
				return out, nil
			}
			return out, fmt.Errorf("$SRV.PING.ctxd: %w", err)
		}
		var ping struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		}
		if json.Unmarshal(m.Data, &ping) != nil || ping.ID == "" {
			continue
		}
		out = append(out, Instance{ID: ping.ID, Name: ping.Metadata["instance"], Stream: ping.Metadata["stream"]})
	}
}

// Context fetches a session's context reply and returns its body, JSON or
// msgpack as asked, whole.
func Context(ctx context.Context, nc *nats.Conn, session string, req Request) ([]byte, error) {
	subj, err := subject.Context(session)
	if err != nil {
		return nil, err
	}
	if req.WaitMS < 0 {
		return nil, fmt.Errorf("%w: WaitMS %d is negative", ErrBadRequest, req.WaitMS)
	}
	if e := req.Edits; e != nil && e.ToolResults != nil && !e.ToolResults.HasTrigger && req.BudgetTokens == 0 {
		return nil, fmt.Errorf("%w: Edits.ToolResults needs TriggerTokens (HasTrigger) or BudgetTokens", ErrBadRequest)
	}
	header := nats.Header{}
	if req.Msgpack {
		header.Set(protocol.HeaderAccept, protocol.AcceptMsgpack)
	}
	x := exchange{
		subject:      subj,
		again:        subj,
		header:       header,
		body:         func() []byte { return requestBody(req, timeoutOf(ctx)) },
		hedge:        hedgeAfter(ctx, req.Hedge),
		chunkTimeout: req.ChunkTimeout,
	}
	x.first = x.body()
	if req.Partitions > 1 {
		routed, err := subject.PartitionContext(session, req.Partitions)
		if err != nil {
			return nil, err
		}
		// The owner first; any instance (the hedge) when it has not
		// answered by then, or at once when no instance holds the
		// partition.
		x.subject = routed
		if deadline, ok := ctx.Deadline(); ok {
			// An owner that stalled (its subscription outlives it until
			// the server drops its connection) costs the request half
			// the time left at most; without hedges it is told so.
			half := max(time.Until(deadline)/2, time.Nanosecond)
			if x.hedge == 0 {
				hctx, cancel := context.WithTimeout(ctx, half)
				x.first = requestBody(req, timeoutOf(hctx))
				cancel()
			}
			if x.hedge == 0 || x.hedge > half {
				x.hedge = half
			}
		}
	}
	return x.do(ctx, nc)
}

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

// timeoutOf returns how long the service has to answer a request sent
// under ctx: the time left before its deadline, less a margin for the
// reply to travel back (0: ctx has no deadline).
func timeoutOf(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	left := time.Until(deadline)
	return max(time.Millisecond, left-min(left/5, 250*time.Millisecond))
}

// requestBody is the request's body: nil when every field has its
// default, else a JSON object or, when the reply is to be msgpack, a
// msgpack map (protocol.Request). timeout, when not 0, is sent as
// timeout_ms: the service answers within it, with the context or an
// error, instead of working on after the client gave up.
func requestBody(req Request, timeout time.Duration) []byte {
	w := req.wire(timeout)
	if w == (protocol.Request{}) {
		return nil // the Accept header asks for msgpack
	}
	if req.Msgpack {
		return w.AppendMsgpack(nil)
	}
	return w.AppendJSON(nil)
}

// wire is the request as the wire carries it.
func (req Request) wire(timeout time.Duration) protocol.Request {
	w := protocol.Request{MinSeq: req.MinSeq, Format: req.Format}
	switch {
	case req.NoWait:
		w.HasWait = true
	case req.WaitMS > 0:
		w.WaitMS, w.HasWait = uint64(req.WaitMS), true
	}
	if timeout > 0 {
		w.TimeoutMS = uint64(max(1, timeout.Milliseconds()))
	}
	if req.BudgetTokens > 0 {
		w.BudgetTokens, w.HasBudget = req.BudgetTokens, true
	}
	w.Edits = req.Edits
	w.Digest = req.Digest
	if req.HaveDigest != "" {
		w.HaveSeq, w.HaveDigest, w.HasHave = req.HaveSeq, req.HaveDigest, true
	}
	return w
}
