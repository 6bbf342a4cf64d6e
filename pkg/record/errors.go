package record

import (
	"errors"
	"fmt"
)

// Errors a decoder reports, wrapped in a *DecodeError. Match them with
// errors.Is.
var (
	ErrNotMap      = errors.New("record is not a map")
	ErrTruncated   = errors.New("input ends in the middle of a value")
	ErrSyntax      = errors.New("syntax error")
	ErrInvalidUTF8 = errors.New("invalid UTF-8 in a string")
	ErrTooDeep     = errors.New("nesting deeper than the limit")
	ErrTooLarge    = errors.New("input larger than the limit")
	ErrUnsupported = errors.New("value outside the JSON data model")
	ErrEmpty       = errors.New("empty input")
	// ErrByteOrderMark: the input starts with a Unicode byte order mark,
	// which neither a JSON record nor a msgpack one ever does.
	ErrByteOrderMark = errors.New("byte order mark before the JSON text")
)

// DecodeError says what is wrong with an input and at which byte offset.
type DecodeError struct {
	Format string // "json" or "msgpack"
	Offset int    // byte offset where the problem was found
	Err    error  // one of the Err... sentinels
	Detail string // optional specifics, such as the unexpected character
}

func (e *DecodeError) Error() string {
	msg := fmt.Sprintf("%s at byte %d: %v", e.Format, e.Offset, e.Err)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *DecodeError) Unwrap() error { return e.Err }
