package server

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// Request limits and defaults of the context endpoint (PROTOCOL.md).
const (
	DefaultWait    = 2 * time.Second
	MaxWait        = 30 * time.Second
	MaxRequestSize = 64 << 10
	// MaxTimeout bounds timeout_ms: a request's own deadline is never
	// longer than the longest wait plus what a load may take.
	MaxTimeout = MaxWait + 30*time.Second
)

// errBadBody is wrapped by every request-body error: a 400.
var errBadBody = errors.New("bad request body")

// contextRequest is a parsed request of the context endpoint.
type contextRequest struct {
	minSeq  uint64
	wait    time.Duration
	msgpack bool          // reply in msgpack
	format  render.Format // never "": no format is render.Neutral
	// budget is budget_tokens; hasBudget says whether the request gave one.
	budget    uint64
	hasBudget bool
	// timeout is timeout_ms: how long the client waits for the reply (0:
	// it did not say). deadline is when the request was received plus
	// timeout; the service answers by then, with the context or an error.
	timeout  time.Duration
	deadline time.Time
	// bounded holds the request to its deadline off the endpoint's
	// goroutine (within.go); nil without one.
	bounded *bounded
}

// parseRequest reads the optional body: empty, a JSON object or a msgpack
// map with optional min_seq, wait_ms, timeout_ms, format and
// budget_tokens; unknown fields are ignored.
func parseRequest(body []byte, accept string) (contextRequest, error) {
	req := contextRequest{wait: DefaultWait, format: render.Neutral}
	if len(body) == 0 {
		req.msgpack = accept == "application/msgpack"
		return req, nil
	}
	if len(body) > MaxRequestSize {
		return req, fmt.Errorf("%w: %d bytes, at most %d", errBadBody, len(body), MaxRequestSize)
	}
	req.msgpack = !record.IsJSON(body)
	dec := record.Decoder{MaxBytes: MaxRequestSize, MaxDepth: 16}
	m, err := dec.Decode(body)
	if err != nil {
		var de *record.DecodeError
		if errors.As(err, &de) && errors.Is(err, record.ErrNotMap) {
			return req, fmt.Errorf("%w: not a JSON object or msgpack map", errBadBody)
		}
		if errors.Is(err, record.ErrByteOrderMark) {
			return req, fmt.Errorf("%w: %v: %s", errBadBody, record.ErrByteOrderMark, de.Detail)
		}
		if de != nil && de.Format == record.FormatUnknown {
			return req, fmt.Errorf("%w: %s", errBadBody, de.Detail) // text, most likely
		}
		return req, fmt.Errorf("%w: not a JSON object or msgpack map (%v)", errBadBody, err)
	}
	if v, ok := m.Get("min_seq"); ok {
		n, err := nonNegative("min_seq", v)
		if err != nil {
			return req, err
		}
		req.minSeq = n
	}
	if v, ok := m.Get("wait_ms"); ok {
		n, err := nonNegative("wait_ms", v)
		if err != nil {
			return req, err
		}
		req.wait = time.Duration(min(n, uint64(MaxWait/time.Millisecond))) * time.Millisecond
	}
	if v, ok := m.Get("timeout_ms"); ok {
		n, err := nonNegative("timeout_ms", v)
		if err != nil {
			return req, err
		}
		req.timeout = time.Duration(min(n, uint64(MaxTimeout/time.Millisecond))) * time.Millisecond
		if req.timeout > 0 {
			// The wait for min_seq fits in the client's time: an answer
			// after it is one nobody reads.
			req.wait = min(req.wait, req.timeout)
		}
	}
	if v, ok := m.Get("format"); ok {
		name, isString := v.(string)
		if !isString {
			return req, fmt.Errorf("%w: format must be a string, got %s", errBadBody, describe(v))
		}
		f, err := render.ParseFormat(name) // "" is neutral
		if err != nil {
			return req, err
		}
		req.format = f
	}
	if v, ok := m.Get("budget_tokens"); ok {
		n, err := nonNegative("budget_tokens", v)
		if err != nil {
			return req, err
		}
		req.budget, req.hasBudget = n, true
	}
	return req, nil
}

// rendered reports whether the reply is one rendered on request: a
// format other than neutral, or a budget to answer.
func (r contextRequest) rendered() bool {
	return r.format != render.Neutral || r.hasBudget
}

// nonNegative reads a non-negative integer that fits in 64 bits: a
// stream sequence, a duration, a count. Anything larger is refused, not
// clamped: a min_seq no stream can reach would only wait out its 504.
func nonNegative(field string, v any) (uint64, error) {
	s, ok := record.IntegerString(v)
	if !ok && record.IsInteger(v) {
		// Whole but too long to spell: too large, or too small.
		if f, _ := record.Float(v); f > 0 {
			return 0, fmt.Errorf("%w: %s must be at most %d, got %s", errBadBody, field, uint64(math.MaxUint64), describe(v))
		}
	}
	if !ok || (len(s) > 0 && s[0] == '-') {
		return 0, fmt.Errorf("%w: %s must be a non-negative integer, got %s", errBadBody, field, describe(v))
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s must be at most %d, got %s", errBadBody, field, uint64(math.MaxUint64), describe(v))
	}
	return n, nil
}

func describe(v any) string {
	b, err := record.MarshalJSON(v)
	if err != nil || len(b) > 40 {
		return "a " + record.TypeName(v)
	}
	return string(b)
}
