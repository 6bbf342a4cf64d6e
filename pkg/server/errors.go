package server

import (
	"errors"

	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// Reply codes of the wire contract, sent in the Nats-Service-Error-Code
// header.
const (
	CodeBadRequest  = "400"
	CodeWaitExpired = "504"
	CodeInternal    = "500"
)

// errTooLarge: the reply would exceed the connection's max payload.
var errTooLarge = errors.New("context larger than the max payload")

// errorReply maps an error to its code and description: the one place
// errors become wire codes. Only errors the client caused are described;
// anything else is a 500 with no internal detail.
func errorReply(err error) (code, description string) {
	switch {
	case errors.Is(err, subject.ErrBadSession), errors.Is(err, errBadBody):
		return CodeBadRequest, err.Error()
	case errors.Is(err, store.ErrWaitExpired):
		return CodeWaitExpired, "min_seq not reached within wait_ms"
	case errors.Is(err, errTooLarge):
		return CodeInternal, "context larger than the max payload"
	}
	return CodeInternal, "internal error"
}
