package protocol

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/record"
)

// Limits and defaults of a context request.
const (
	// DefaultWait is how long the service waits for min_seq when the
	// request does not say (wait_ms).
	DefaultWait = 2 * time.Second
	// MaxWait bounds wait_ms.
	MaxWait = 30 * time.Second
	// MaxRequestSize bounds a request's body.
	MaxRequestSize = 64 << 10
	// MaxTimeout bounds timeout_ms: a request's own deadline is never
	// longer than the longest wait plus what a load may take.
	MaxTimeout = MaxWait + 30*time.Second
)

// ErrBadRequest is wrapped by every error of a request body: a 400.
var ErrBadRequest = errors.New("bad request body")

// Request is a request of the context endpoint, as its body carries it.
// The zero Request is the empty body.
type Request struct {
	// MinSeq: answer once every record up to this stream sequence is
	// applied (min_seq).
	MinSeq uint64
	// WaitMS is wait_ms, when HasWait: how long the service may wait for
	// MinSeq (0: answer now or fail).
	WaitMS  uint64
	HasWait bool
	// TimeoutMS is timeout_ms: how long the client waits for the reply
	// (0: it does not say).
	TimeoutMS uint64
	// Format names the rendering (format): "" or "neutral", "anthropic",
	// "openai-chat", "openai-responses", "gemini". The service checks
	// the name.
	Format string
	// BudgetTokens is budget_tokens, when HasBudget.
	BudgetTokens uint64
	HasBudget    bool
	// Edits is edits: the context edits to apply before rendering (nil:
	// none; docs/EDITS.md).
	Edits *edits.Config
	// NoDigest is "digest": false: the reply goes without its digest
	// (Delta replies, in delta.go), as a reply of protocol 3.4 to a
	// request without digest. A reply carries its digest otherwise.
	NoDigest bool
	// AskDigest is "digest": true, written for a service before 3.5,
	// which adds the digest only when asked. Not with NoDigest.
	AskDigest bool
	// HaveSeq and HaveDigest, when HasHave, are have_seq and have_digest:
	// the seq and digest of the reply the client holds, against which
	// the service may answer with a delta.
	HaveSeq    uint64
	HaveDigest string
	HasHave    bool
}

// Wait is how long the service may wait for MinSeq: wait_ms bounded by
// MaxWait, DefaultWait without one, and never past the client's timeout.
func (r Request) Wait() time.Duration {
	w := DefaultWait
	if r.HasWait {
		w = time.Duration(min(r.WaitMS, uint64(MaxWait/time.Millisecond))) * time.Millisecond
	}
	if t := r.Timeout(); t > 0 {
		// An answer after the client's time is one nobody reads.
		w = min(w, t)
	}
	return w
}

// Timeout is timeout_ms bounded by MaxTimeout; 0 when the request has
// none.
func (r Request) Timeout() time.Duration {
	return time.Duration(min(r.TimeoutMS, uint64(MaxTimeout/time.Millisecond))) * time.Millisecond
}

// ParseRequest reads a request body: a JSON object or a msgpack map (the
// reply is encoded as the request was: record.IsJSON tells which) with
// optional min_seq, wait_ms, timeout_ms, format, budget_tokens, edits,
// digest, have_seq and have_digest;
// unknown fields are ignored, an empty body is the zero Request. Every
// error wraps ErrBadRequest and says what is wrong.
func ParseRequest(body []byte) (Request, error) {
	var req Request
	if len(body) == 0 {
		return req, nil
	}
	if len(body) > MaxRequestSize {
		return req, fmt.Errorf("%w: %d bytes, at most %d", ErrBadRequest, len(body), MaxRequestSize)
	}
	dec := record.Decoder{MaxBytes: MaxRequestSize, MaxDepth: 16}
	m, err := dec.Decode(body)
	if err != nil {
		var de *record.DecodeError
		if errors.As(err, &de) && errors.Is(err, record.ErrNotMap) {
			return req, fmt.Errorf("%w: not a JSON object or msgpack map", ErrBadRequest)
		}
		if errors.Is(err, record.ErrByteOrderMark) {
			return req, fmt.Errorf("%w: %v: %s", ErrBadRequest, record.ErrByteOrderMark, de.Detail)
		}
		if de != nil && de.Format == record.FormatUnknown {
			return req, fmt.Errorf("%w: %s", ErrBadRequest, de.Detail) // text, most likely
		}
		return req, fmt.Errorf("%w: not a JSON object or msgpack map (%v)", ErrBadRequest, err)
	}
	if v, ok := m.Get("min_seq"); ok {
		if req.MinSeq, err = nonNegative("min_seq", v); err != nil {
			return req, err
		}
	}
	if v, ok := m.Get("wait_ms"); ok {
		if req.WaitMS, err = nonNegative("wait_ms", v); err != nil {
			return req, err
		}
		req.HasWait = true
	}
	if v, ok := m.Get("timeout_ms"); ok {
		if req.TimeoutMS, err = nonNegative("timeout_ms", v); err != nil {
			return req, err
		}
	}
	if v, ok := m.Get("format"); ok {
		name, isString := v.(string)
		if !isString {
			return req, fmt.Errorf("%w: format must be a string, got %s", ErrBadRequest, record.Describe(v))
		}
		req.Format = name
	}
	if v, ok := m.Get("budget_tokens"); ok {
		if req.BudgetTokens, err = nonNegative("budget_tokens", v); err != nil {
			return req, err
		}
		req.HasBudget = true
	}
	if v, ok := m.Get("edits"); ok {
		if req.Edits, err = parseEdits(v, req.HasBudget); err != nil {
			return req, err
		}
	}
	if err := req.parseDelta(m.Get); err != nil {
		return req, err
	}
	return req, nil
}

// parseEdits reads the edits field: tool_results needs a trigger, its
// own or the request's budget_tokens.
func parseEdits(v any, hasBudget bool) (*edits.Config, error) {
	c, err := edits.Parse(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if c.ToolResults != nil && !c.ToolResults.HasTrigger && !hasBudget {
		return nil, fmt.Errorf("%w: %w: edits.tool_results.trigger_tokens is required when the request has no budget_tokens", ErrBadRequest, edits.ErrInvalid)
	}
	return c, nil
}

// parseDelta reads digest, have_seq and have_digest: have_seq and
// have_digest go together, and a digest is 64 lowercase hex digits.
func (r *Request) parseDelta(get func(string) (any, bool)) error {
	if v, ok := get("digest"); ok {
		b, isBool := v.(bool)
		if !isBool {
			return fmt.Errorf("%w: digest must be true or false, got %s", ErrBadRequest, record.Describe(v))
		}
		r.NoDigest, r.AskDigest = !b, b
	}
	seq, hasSeq := get("have_seq")
	d, hasDigest := get("have_digest")
	switch {
	case !hasSeq && !hasDigest:
		return nil
	case !hasSeq:
		return fmt.Errorf("%w: have_digest without have_seq: give both, or neither", ErrBadRequest)
	case !hasDigest:
		return fmt.Errorf("%w: have_seq without have_digest: give both, or neither", ErrBadRequest)
	}
	var err error
	if r.HaveSeq, err = nonNegative("have_seq", seq); err != nil {
		return err
	}
	s, isString := d.(string)
	if !isString || !isDigest(s) {
		return fmt.Errorf("%w: have_digest must be a digest of %d lowercase hex digits, got %s", ErrBadRequest, DigestLen, record.Describe(d))
	}
	if r.NoDigest {
		return fmt.Errorf("%w: digest false with have_seq and have_digest: a delta reply carries its digest", ErrBadRequest)
	}
	r.HaveDigest, r.HasHave = s, true
	return nil
}

func isDigest(s string) bool {
	if len(s) != DigestLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// AppendJSON appends the request as a JSON object: min_seq always, the
// other fields when given.
func (r Request) AppendJSON(b []byte) []byte {
	b = append(b, `{"min_seq":`...)
	b = strconv.AppendUint(b, r.MinSeq, 10)
	if r.HasWait {
		b = append(b, `,"wait_ms":`...)
		b = strconv.AppendUint(b, r.WaitMS, 10)
	}
	if r.TimeoutMS > 0 {
		b = append(b, `,"timeout_ms":`...)
		b = strconv.AppendUint(b, r.TimeoutMS, 10)
	}
	if r.Format != "" {
		b = append(b, `,"format":`...)
		b = record.AppendJSONString(b, r.Format)
	}
	if r.HasBudget {
		b = append(b, `,"budget_tokens":`...)
		b = strconv.AppendUint(b, r.BudgetTokens, 10)
	}
	if r.Edits != nil {
		b = append(b, `,"edits":`...)
		b, _ = record.AppendJSON(b, r.Edits.Map()) // strings, integers, booleans
	}
	if r.NoDigest {
		b = append(b, `,"digest":false`...)
	} else if r.AskDigest {
		b = append(b, `,"digest":true`...)
	}
	if r.HasHave {
		b = append(b, `,"have_seq":`...)
		b = strconv.AppendUint(b, r.HaveSeq, 10)
		b = append(b, `,"have_digest":`...)
		b = record.AppendJSONString(b, r.HaveDigest)
	}
	return append(b, '}')
}

// AppendMsgpack appends the request as a msgpack map, with the fields
// AppendJSON writes: a msgpack request asks for a msgpack reply.
func (r Request) AppendMsgpack(b []byte) []byte {
	m := record.NewMap("min_seq", r.MinSeq)
	if r.HasWait {
		m.Set("wait_ms", r.WaitMS)
	}
	if r.TimeoutMS > 0 {
		m.Set("timeout_ms", r.TimeoutMS)
	}
	if r.Format != "" {
		m.Set("format", r.Format)
	}
	if r.HasBudget {
		m.Set("budget_tokens", r.BudgetTokens)
	}
	if r.Edits != nil {
		m.Set("edits", r.Edits.Map())
	}
	if r.NoDigest {
		m.Set("digest", false)
	} else if r.AskDigest {
		m.Set("digest", true)
	}
	if r.HasHave {
		m.Set("have_seq", r.HaveSeq)
		m.Set("have_digest", r.HaveDigest)
	}
	out, err := record.MarshalMsgpack(m)
	if err != nil {
		panic(err) // integers and strings always encode
	}
	return append(b, out...)
}

// nonNegative reads a non-negative integer that fits in 64 bits: a
// stream sequence, a duration, a count. Anything larger is refused, not
// clamped: a min_seq no stream can reach would only wait out its 504.
func nonNegative(field string, v any) (uint64, error) {
	s, ok := record.IntegerString(v)
	if !ok && record.IsInteger(v) {
		// Whole but too long to spell: too large, or too small.
		if f, _ := record.Float(v); f > 0 {
			return 0, fmt.Errorf("%w: %s must be at most %d, got %s", ErrBadRequest, field, uint64(math.MaxUint64), record.Describe(v))
		}
	}
	if !ok || (len(s) > 0 && s[0] == '-') {
		return 0, fmt.Errorf("%w: %s must be a non-negative integer, got %s", ErrBadRequest, field, record.Describe(v))
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s must be at most %d, got %s", ErrBadRequest, field, uint64(math.MaxUint64), record.Describe(v))
	}
	return n, nil
}
