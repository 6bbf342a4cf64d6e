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
//
//	client.go     Context, Request, Error, CheckInbox: a request as sent
//	do.go         Do: a request's exchange, its chunks, sent again after a reconnect
//	keeper.go     Keeper: deltas against the last reply
//	instances.go  Partitions, Instances: what the service says of itself
//	publish.go    Publish: records to the stream
package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

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
	// NoDigest asks for the reply without its digest (a reply carries
	// it otherwise); HaveSeq and HaveDigest, when HaveDigest is set,
	// name the reply the caller holds, and the reply may be a delta
	// against it (docs/PROTOCOL.md, "Delta replies"). Context returns
	// the reply as it comes: Keeper applies deltas.
	NoDigest bool
	// askDigest writes "digest": true (Keeper), for a service before
	// protocol 3.5, which adds the digest only when asked.
	askDigest  bool
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
	w.NoDigest, w.AskDigest = req.NoDigest, req.askDigest && !req.NoDigest
	if req.HaveDigest != "" {
		w.HaveSeq, w.HaveDigest, w.HasHave = req.HaveSeq, req.HaveDigest, true
	}
	return w
}
