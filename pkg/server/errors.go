package server

import (
	"errors"
	"fmt"

	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/render"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Reply codes of the wire contract (package protocol), sent in the
// Nats-Service-Error-Code header.
const (
	CodeBadRequest  = protocol.CodeBadRequest
	CodeNotFound    = protocol.CodeNotFound
	CodeWaitExpired = protocol.CodeWaitExpired
	CodeInternal    = protocol.CodeInternal
	CodeBusy        = protocol.CodeBusy
)

var (
	// errTooLarge: the reply would exceed the connection's max payload.
	errTooLarge = errors.New("context larger than the max payload")
	// errNotMsgpack: the context holds a number msgpack cannot carry.
	errNotMsgpack = errors.New("context has no msgpack form")
	// errNoChunk: a chunk request for a reply not held (expired, fetched
	// already, or never made).
	errNoChunk = errors.New("no such chunk")
)

// tooLargeError: a reply larger than the service sends (MaxReplyBytes).
type tooLargeError struct{ size, max int }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("context reply of %d bytes is larger than the largest this service sends, %d bytes (twice ctxd serve --max-session-bytes, at least 512 MiB)", e.size, e.max)
}

func (e *tooLargeError) Is(target error) bool { return target == errTooLarge }

// errorReply maps an error to its code and description: the one place
// errors become wire codes. Only errors the client caused are described;
// anything else is a 500 with no internal detail.
func errorReply(err error) (code, description string) {
	var tooLarge *tooLargeError
	switch {
	case errors.Is(err, subject.ErrBadSession), errors.Is(err, errBadBody):
		return CodeBadRequest, err.Error()
	case errors.Is(err, render.ErrUnknownFormat):
		// Names the allowed values.
		return CodeBadRequest, err.Error()
	case errors.Is(err, errNoTime):
		return CodeWaitExpired, "no answer within timeout_ms: the stream did not answer in time (a JetStream leader election, a node down?); retry"
	case errors.Is(err, errStreamTimeout):
		return CodeWaitExpired, "the stream did not answer in time (a JetStream leader election, a node down?); retry"
	case errors.Is(err, store.ErrWaitExpired):
		return CodeWaitExpired, "min_seq not reached within wait_ms"
	case errors.Is(err, errTooManyWaiters):
		return CodeBusy, "too many requests waiting for min_seq: retry later, or with wait_ms 0"
	case errors.Is(err, errLargeBusy):
		return CodeBusy, "too many large replies waiting to be sent: retry later"
	case errors.Is(err, errBusy):
		return CodeBusy, "too many requests for sessions not in the cache: retry later"
	case errors.Is(err, errNoChunk):
		return CodeNotFound, "no such chunk: expired, evicted, fetched already, or never made; request the context again"
	case errors.As(err, &tooLarge):
		return CodeInternal, tooLarge.Error()
	case errors.Is(err, errTooLarge):
		return CodeInternal, "context too large to hold for chunked delivery"
	case errors.Is(err, errNotMsgpack):
		return CodeInternal, "context holds a number msgpack cannot carry; request JSON"
	}
	return CodeInternal, "internal error"
}
