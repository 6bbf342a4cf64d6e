// Package client fetches model contexts from a ctxd service: it checks the
// session id before sending, turns service errors into *Error values, and
// reassembles replies larger than the connection's max payload.
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

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Headers of a chunked reply, as the service sends them.
const (
	headerChunks       = "Ctxd-Chunks"
	headerChunkSubject = "Ctxd-Chunk-Subject"
	headerReplyBytes   = "Ctxd-Reply-Bytes"
	headerAcceptChunks = "Ctxd-Accept-Chunks"
	headerChunk        = "Ctxd-Chunk"
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
	msg := nats.NewMsg(subj)
	msg.Data = requestBody(req, timeoutOf(ctx))
	if req.Msgpack {
		msg.Header.Set("Accept", "application/msgpack")
	}
	if req.Partitions > 1 {
		routed, err := subject.PartitionContext(session, req.Partitions)
		if err != nil {
			return nil, err
		}
		v1 := msg.Subject
		msg.Subject = routed
		// The owner gets half the time left: one that stalled (its
		// subscription outlives it until the server drops its
		// connection) costs the request no more than that.
		actx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok {
			actx, cancel = context.WithTimeout(ctx, time.Until(deadline)/2)
		}
		msg.Data = requestBody(req, timeoutOf(actx))
		out, err := do(actx, nc, msg, req.ChunkTimeout)
		stalled := err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded)
		cancel()
		if !errors.Is(err, ErrNoService) && !stalled {
			return out, err
		}
		// No instance holds the partition now, or its owner did not
		// answer in time: any instance answers, in the time left.
		msg.Subject = v1
		msg.Data = requestBody(req, timeoutOf(ctx))
	}
	return do(ctx, nc, msg, req.ChunkTimeout)
}

// Do sends a request to the service and returns the reply body, joining
// the chunks of a reply larger than the max payload. It asks for the
// chunks to be pushed to its own inbox (Ctxd-Accept-Chunks: push), so
// the service holds nothing for it. A service that does not push
// (protocol 2), or not a reply that large (more than the NATS server
// lets a connection fall behind), names a subject to fetch them from,
// and Do fetches them one after the other: at most one waits for it at
// the NATS server, whatever the reply's size.
func Do(ctx context.Context, nc *nats.Conn, msg *nats.Msg) ([]byte, error) {
	return do(ctx, nc, msg, 0)
}

// do is Do, with each chunk after the first waited for at most
// chunkTimeout past ctx's deadline when it is set (Request.ChunkTimeout).
func do(ctx context.Context, nc *nats.Conn, msg *nats.Msg, chunkTimeout time.Duration) ([]byte, error) {
	// A subscription of its own, read through a small channel: a sync
	// subscription would allocate a queue of 64k messages per request.
	inbox := nc.NewInbox()
	msgs, done := make(chan *nats.Msg, 4), make(chan struct{})
	defer close(done)
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		select {
		case msgs <- m:
		case <-done:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", msg.Subject, err)
	}
	defer sub.Unsubscribe()
	// The pushed chunks of one reply may together exceed the default
	// bound on what a subscription queues: the reply's size bounds them.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("request %s: %w", msg.Subject, err)
	}
	m := &nats.Msg{Subject: msg.Subject, Reply: inbox, Data: msg.Data, Header: nats.Header{}}
	for k, v := range msg.Header {
		m.Header[k] = v
	}
	m.Header.Set(headerAcceptChunks, "push")
	if err := nc.PublishMsg(m); err != nil {
		return nil, fmt.Errorf("request %s: %w", msg.Subject, err)
	}
	reply, err := next(ctx, msgs, msg.Subject)
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
	if chunkTimeout > 0 {
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
		if chunkTimeout > 0 {
			cctx, cancel = context.WithTimeout(chunkCtx, chunkTimeout)
		}
		var part *nats.Msg
		if prefix != "" {
			part, err = request(cctx, nc, nats.NewMsg(prefix+"."+strconv.Itoa(k)))
		} else if part, err = next(cctx, msgs, msg.Subject); err == nil && part.Header.Get(headerChunk) != strconv.Itoa(k) {
			err = fmt.Errorf("got chunk %q", part.Header.Get(headerChunk))
		}
		cancel()
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

// next returns the next message of a request's inbox.
func next(ctx context.Context, msgs <-chan *nats.Msg, subj string) (*nats.Msg, error) {
	var reply *nats.Msg
	select {
	case reply = <-msgs:
	case <-ctx.Done():
		return nil, fmt.Errorf("request %s: %w", subj, ctx.Err())
	}
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
// msgpack map. timeout, when not 0, is sent as timeout_ms: the service
// answers within it, with the context or an error, instead of working
// on after the client gave up.
func requestBody(req Request, timeout time.Duration) []byte {
	timeoutMS := uint64(0)
	if timeout > 0 {
		timeoutMS = uint64(max(1, timeout.Milliseconds()))
	}
	if req.MinSeq == 0 && req.WaitMS <= 0 && !req.NoWait && req.Format == "" && req.BudgetTokens == 0 && timeoutMS == 0 {
		return nil // the Accept header asks for msgpack
	}
	if req.Msgpack {
		return msgpackRequest(req, timeoutMS)
	}
	body := []byte(`{"min_seq":` + strconv.FormatUint(req.MinSeq, 10))
	if req.NoWait {
		body = append(body, `,"wait_ms":0`...)
	} else if req.WaitMS > 0 {
		body = append(body, `,"wait_ms":`+strconv.Itoa(req.WaitMS)...)
	}
	if timeoutMS > 0 {
		body = append(body, `,"timeout_ms":`+strconv.FormatUint(timeoutMS, 10)...)
	}
	if req.Format != "" {
		body = append(body, `,"format":`...)
		body = record.AppendJSONString(body, req.Format)
	}
	if req.BudgetTokens > 0 {
		body = append(body, `,"budget_tokens":`+strconv.FormatUint(req.BudgetTokens, 10)...)
	}
	return append(body, '}')
}

// msgpackRequest encodes {"min_seq": N, "wait_ms": W, "timeout_ms": T,
// "format": F, "budget_tokens": B} as a msgpack map; timeout_ms, format
// and budget_tokens only when set.
func msgpackRequest(req Request, timeoutMS uint64) []byte {
	w := uint64(2000)
	if req.NoWait {
		w = 0
	} else if req.WaitMS > 0 {
		w = uint64(req.WaitMS)
	}
	m := record.NewMap("min_seq", req.MinSeq, "wait_ms", w)
	if timeoutMS > 0 {
		m.Set("timeout_ms", timeoutMS)
	}
	if req.Format != "" {
		m.Set("format", req.Format)
	}
	if req.BudgetTokens > 0 {
		m.Set("budget_tokens", req.BudgetTokens)
	}
	b, _ := record.MarshalMsgpack(m)
	return b
}
