package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

const maxUint64 = ^uint64(0)

// msgpackOf encodes a request body as msgpack.
func msgpackOf(t testing.TB, kv ...any) []byte {
	t.Helper()
	b, err := record.MarshalMsgpack(record.NewMap(kv...))
	require.NoError(t, err)
	return b
}

// msgpackFloat encodes a one-field map whose value is a float64.
func msgpackFloat(field string, f float64) []byte {
	b := record.AppendMsgpackMapLen(nil, 1)
	b = record.AppendMsgpackString(b, field)
	return binary.BigEndian.AppendUint64(append(b, 0xcb), math.Float64bits(f))
}

// nested returns a JSON body whose unknown field nests depth arrays.
func nested(depth int) []byte {
	return []byte(`{"min_seq":1,"x":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
}

// padded returns a JSON request of exactly size bytes.
func padded(size int) []byte {
	head, tail := `{"min_seq":3,"pad":"`, `"}`
	return []byte(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
}

func TestParseRequest(t *testing.T) {
	def := DefaultWait
	tests := []struct {
		name    string
		body    []byte
		accept  string
		minSeq  uint64
		wait    time.Duration
		msgpack bool
		bad     string // when not empty: a 400 whose description has this
		// noDigest: the request asks for the reply without its digest.
		noDigest bool
	}{
		// The body's form and the reply's.
		{name: "empty body", body: nil, wait: def},
		{name: "empty body, Accept msgpack", body: []byte{}, accept: "application/msgpack", wait: def, msgpack: true},
		{name: "empty body, Accept JSON", accept: "application/json", wait: def},
		{name: "empty JSON object", body: []byte(`{}`), wait: def},
		{name: "JSON object after white space", body: []byte(" \n\t{\"min_seq\":5}"), minSeq: 5, wait: def},
		{name: "JSON object, Accept msgpack is ignored", body: []byte(`{"min_seq":5}`), accept: "application/msgpack", minSeq: 5, wait: def},
		{name: "JSON, both fields", body: []byte(`{"min_seq":15,"wait_ms":2000}`), minSeq: 15, wait: 2 * time.Second},
		{name: "empty msgpack map", body: []byte{0x80}, wait: def, msgpack: true},
		{name: "msgpack, both fields", body: msgpackOf(t, "min_seq", int64(15), "wait_ms", int64(250)), minSeq: 15, wait: 250 * time.Millisecond, msgpack: true},
		{name: "unknown fields are ignored", body: []byte(`{"future":{"a":[1,"x",null]},"min_seq":4,"also":"x"}`), minSeq: 4, wait: def},
		{name: "unknown msgpack fields are ignored", body: msgpackOf(t, "x", []any{true}, "min_seq", int64(4)), minSeq: 4, wait: def, msgpack: true},
		{name: "nesting within the limit", body: nested(8), minSeq: 1, wait: def},
		{name: "digest asked", body: []byte(`{"digest":true}`), wait: def},
		{name: "digest false", body: []byte(`{"digest":false}`), wait: def, noDigest: true},
		{name: "msgpack, digest false", body: msgpackOf(t, "digest", false), wait: def, msgpack: true, noDigest: true},

		// Integers in every spelling.
		{name: "min_seq 0", body: []byte(`{"min_seq":0}`), wait: def},
		{name: "min_seq -0", body: []byte(`{"min_seq":-0}`), wait: def},
		{name: "min_seq 2.0", body: []byte(`{"min_seq":2.0}`), minSeq: 2, wait: def},
		{name: "min_seq 1E1", body: []byte(`{"min_seq":1E1}`), minSeq: 10, wait: def},
		{name: "min_seq 1.5e1", body: []byte(`{"min_seq":1.5e1}`), minSeq: 15, wait: def},
		{name: "min_seq 100e-2", body: []byte(`{"min_seq":100e-2}`), minSeq: 1, wait: def},
		{name: "min_seq max uint64", body: []byte(`{"min_seq":18446744073709551615}`), minSeq: maxUint64, wait: def},
		{name: "min_seq 0E999999999", body: []byte(`{"min_seq":0E999999999}`), wait: def},
		{name: "min_seq 2^63", body: []byte(`{"min_seq":9223372036854775808}`), minSeq: 1 << 63, wait: def},
		{name: "min_seq max uint64 as 1.8446744073709551615E19", body: []byte(`{"min_seq":1.8446744073709551615E19}`), minSeq: maxUint64, wait: def},
		{name: "msgpack min_seq float 2.0", body: msgpackFloat("min_seq", 2), minSeq: 2, wait: def, msgpack: true},
		// A float counts as the integer its shortest form spells.
		{name: "msgpack min_seq float 2^63", body: msgpackFloat("min_seq", 1<<63), minSeq: 9223372036854776000, wait: def, msgpack: true},
		{name: "msgpack min_seq uint64", body: msgpackOf(t, "min_seq", maxUint64), minSeq: maxUint64, wait: def, msgpack: true},
		{name: "wait_ms 0", body: []byte(`{"wait_ms":0}`), wait: 0},
		{name: "wait_ms 30000", body: []byte(`{"wait_ms":30000}`), wait: MaxWait},
		{name: "wait_ms 30001 clamps", body: []byte(`{"wait_ms":30001}`), wait: MaxWait},
		{name: "wait_ms 1E1", body: []byte(`{"wait_ms":1E1}`), wait: 10 * time.Millisecond},
		{name: "wait_ms 1E19 clamps", body: []byte(`{"wait_ms":1E19}`), wait: MaxWait},
		{name: "msgpack wait_ms max uint64 clamps", body: msgpackOf(t, "wait_ms", maxUint64), wait: MaxWait, msgpack: true},

		// Values that are not non-negative integers.
		{name: "min_seq -1", body: []byte(`{"min_seq":-1}`), bad: "min_seq must be a non-negative integer, got -1"},
		{name: "min_seq -1E999999999", body: []byte(`{"min_seq":-1E999999999}`), bad: "min_seq"},
		{name: "min_seq 1.5", body: []byte(`{"min_seq":1.5}`), bad: "min_seq"},
		{name: "min_seq 1E-1", body: []byte(`{"min_seq":1E-1}`), bad: "min_seq"},
		{name: "min_seq string", body: []byte(`{"min_seq":"5"}`), bad: `got "5"`},
		{name: "min_seq null", body: []byte(`{"min_seq":null}`), bad: "got null"},
		{name: "min_seq true", body: []byte(`{"min_seq":true}`), bad: "got true"},
		{name: "min_seq array", body: []byte(`{"min_seq":[1]}`), bad: "min_seq"},
		{name: "min_seq object", body: []byte(`{"min_seq":{}}`), bad: "min_seq"},
		{name: "wait_ms -5", body: []byte(`{"wait_ms":-5}`), bad: "wait_ms must be a non-negative integer"},
		{name: "wait_ms 0.5", body: []byte(`{"wait_ms":0.5}`), bad: "wait_ms"},
		{name: "wait_ms string", body: []byte(`{"wait_ms":"100"}`), bad: "wait_ms"},
		{name: "wait_ms null", body: []byte(`{"wait_ms":null}`), bad: "wait_ms"},
		{name: "wait_ms false", body: []byte(`{"wait_ms":false}`), bad: "wait_ms"},
		{name: "msgpack min_seq -1", body: msgpackOf(t, "min_seq", int64(-1)), bad: "min_seq"},
		{name: "msgpack min_seq 2.5", body: msgpackFloat("min_seq", 2.5), bad: "min_seq"},
		{name: "msgpack min_seq string", body: msgpackOf(t, "min_seq", "5"), bad: "min_seq"},
		{name: "msgpack min_seq nil", body: msgpackOf(t, "min_seq", nil), bad: "min_seq"},
		{name: "msgpack wait_ms -1e300", body: msgpackFloat("wait_ms", -1e300), bad: "wait_ms"},

		// Integers no 64-bit sequence holds: refused at once, never
		// clamped into one that is waited for.
		{name: "min_seq 2^64", body: []byte(`{"min_seq":18446744073709551616}`), bad: "min_seq must be at most 18446744073709551615, got 18446744073709551616"},
		{name: "min_seq 1E30", body: []byte(`{"min_seq":1E30}`), bad: "min_seq must be at most 18446744073709551615, got 1E30"},
		{name: "min_seq 1E999999999", body: []byte(`{"min_seq":1E999999999}`), bad: "min_seq must be at most 18446744073709551615, got 1E999999999"},
		{name: "min_seq of 50 digits", body: []byte(`{"min_seq":` + strings.Repeat("9", 50) + `}`), bad: "min_seq must be at most 18446744073709551615, got a number"},
		{name: "msgpack min_seq float 2^64", body: msgpackFloat("min_seq", 1<<64), bad: "min_seq must be at most 18446744073709551615"},
		{name: "msgpack min_seq 1e300", body: msgpackFloat("min_seq", 1e300), bad: "min_seq must be at most 18446744073709551615"},
		{name: "msgpack min_seq +Inf", body: msgpackFloat("min_seq", math.Inf(1)), bad: "non-finite float"},
		{name: "msgpack min_seq NaN", body: msgpackFloat("min_seq", math.NaN()), bad: "non-finite float"},
		{name: "wait_ms 2^64", body: []byte(`{"wait_ms":18446744073709551616}`), bad: "wait_ms must be at most 18446744073709551615"},
		{name: "wait_ms 1E999999999", body: []byte(`{"wait_ms":1E999999999}`), bad: "wait_ms must be at most 18446744073709551615"},
		{name: "msgpack wait_ms 1e300", body: msgpackFloat("wait_ms", 1e300), bad: "wait_ms must be at most 18446744073709551615"},
		{name: "budget_tokens 2^64", body: []byte(`{"budget_tokens":18446744073709551616}`), bad: "budget_tokens must be at most 18446744073709551615"},
		{name: "budget_tokens -1", body: []byte(`{"budget_tokens":-1}`), bad: "budget_tokens must be a non-negative integer, got -1"},
		{name: "budget_tokens 0.5", body: []byte(`{"budget_tokens":0.5}`), bad: "budget_tokens must be a non-negative integer, got 0.5"},
		{name: "msgpack budget_tokens 1e300", body: msgpackFloat("budget_tokens", 1e300), bad: "budget_tokens must be at most 18446744073709551615"},
		{name: "a long bad value is described by its type", body: []byte(`{"min_seq":"` + strings.Repeat("x", 100) + `"}`), bad: "got a string"},

		// Bodies that are not a map.
		{name: "JSON array", body: []byte(`[]`), bad: "not a JSON object or msgpack map"},
		{name: "JSON array of a map", body: []byte(`[{"min_seq":1}]`), bad: "not a JSON object"},
		{name: "JSON string", body: []byte(`"x"`), bad: "not a JSON object"},
		{name: "JSON number", body: []byte(`15`), bad: "not a JSON object"},
		{name: "JSON null", body: []byte(`null`), bad: "not a JSON object"},
		{name: "JSON true", body: []byte(`true`), bad: "not a JSON object"},
		{name: "one byte", body: []byte(`5`), bad: "not a JSON object"},
		{name: "white space only", body: []byte(" \n"), bad: "not a JSON object"},
		{name: "truncated JSON", body: []byte(`{"min_seq":`), bad: "not a JSON object"},
		{name: "JSON with trailing data", body: []byte(`{"min_seq":1} {}`), bad: "not a JSON object"},
		{name: "plain text", body: []byte(`min_seq=5`), bad: "not a JSON object"},
		{name: "msgpack array", body: []byte{0x91, 0x01}, bad: "not a JSON object or msgpack map"},
		{name: "msgpack nil", body: []byte{0xc0}, bad: "not a JSON object"},
		{name: "msgpack integer", body: []byte{0x05}, bad: "not a JSON object"},
		{name: "truncated msgpack map", body: []byte{0x82, 0xa1, 'a'}, bad: "not a JSON object"},
		{name: "msgpack map with a non-string key", body: []byte{0x81, 0x01, 0x01}, bad: "not a JSON object"},
		{name: "invalid UTF-8 in JSON", body: []byte("{\"x\":\"\xff\"}"), bad: "not a JSON object"},
		{name: "JSON after a byte order mark", body: []byte("\xef\xbb\xbf{\"min_seq\":1}"), bad: "bad request body: byte order mark before the JSON text: UTF-8's EF BB BF; remove it"},
		{name: "a byte order mark alone", body: []byte("\xef\xbb\xbf"), bad: "byte order mark"},
		{name: "UTF-16 JSON", body: []byte("\xff\xfe{\x00}\x00"), bad: "byte order mark before the JSON text: UTF-16's FF FE"},

		// Limits.
		{name: "largest body", body: padded(MaxRequestSize), minSeq: 3, wait: def},
		{name: "oversized body", body: padded(MaxRequestSize + 1), bad: "65537 bytes, at most 65536"},
		{name: "nesting beyond the limit", body: nested(64), bad: "not a JSON object"},
		{name: "deep nesting", body: nested(30000), bad: "not a JSON object"},
		{name: "deep msgpack nesting", body: append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 30000)...), bad: "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := parseRequest(tt.body, tt.accept)
			if tt.bad != "" {
				require.Error(t, err)
				require.True(t, errors.Is(err, errBadBody), "%v does not wrap errBadBody", err)
				code, desc := errorReply(err)
				require.Equal(t, CodeBadRequest, code)
				require.Contains(t, desc, tt.bad)
				return
			}
			require.NoError(t, err)
			require.Equal(t, contextRequest{minSeq: tt.minSeq, wait: tt.wait, msgpack: tt.msgpack, format: render.Neutral, digest: !tt.noDigest}, req)
		})
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte{}, "")
	f.Add([]byte{}, "application/msgpack")
	f.Add([]byte(`{"min_seq":15,"wait_ms":2000}`), "")
	f.Add([]byte(`{"wait_ms":1E999999999}`), "")
	f.Add([]byte(`{"min_seq":18446744073709551616}`), "")
	f.Add([]byte("\xef\xbb\xbf{\"min_seq\":1}"), "")
	f.Add([]byte{0x82, 0xa7, 'm', 'i', 'n', '_', 's', 'e', 'q', 0x0f, 0xa7, 'w', 'a', 'i', 't', '_', 'm', 's', 0xcd, 0x07, 0xd0}, "")
	f.Fuzz(func(t *testing.T, body []byte, accept string) {
		req, err := parseRequest(body, accept)
		if err != nil {
			require.ErrorIs(t, err, errBadBody)
			code, _ := errorReply(err)
			require.Equal(t, CodeBadRequest, code)
			return
		}
		require.GreaterOrEqual(t, req.wait, time.Duration(0))
		require.LessOrEqual(t, req.wait, MaxWait)
		if len(body) == 0 {
			require.Equal(t, accept == "application/msgpack", req.msgpack)
		} else {
			require.Equal(t, !record.IsJSON(body), req.msgpack, "the reply takes the body's form")
			require.LessOrEqual(t, len(body), MaxRequestSize)
			require.False(t, bytes.Equal(body, []byte("null")))
		}
	})
}

// Text sent as a request is reported as such, once.
func TestParseRequest_Text(t *testing.T) {
	_, err := parseRequest([]byte("hello there"), "")
	require.ErrorIs(t, err, errBadBody)
	require.Equal(t, `bad request body: not a JSON object or msgpack map (starts with "hello there")`, err.Error())
}

// timeout_ms is how long the client waits for the reply: it bounds the
// wait for min_seq too, and is clamped like wait_ms.
func xTestParseRequest_Timeout(t *testing.T) {
	tests := []struct {
		name    string
		body    []byte
		wait    time.Duration
		timeout time.Duration
		bad     string
	}{
		{name: "none", body: []byte(`{}`), wait: DefaultWait},
		{name: "longer than the wait", body: []byte(`{"timeout_ms":5000}`), wait: DefaultWait, timeout: 5 * time.Second},
		{name: "shorter than the default wait", body: []byte(`{"timeout_ms":900}`), wait: 900 * time.Millisecond, timeout: 900 * time.Millisecond},
		{name: "shorter than wait_ms", body: []byte(`{"wait_ms":3000,"timeout_ms":1000}`), wait: time.Second, timeout: time.Second},
		{name: "0 says nothing", body: []byte(`{"wait_ms":3000,"timeout_ms":0}`), wait: 3 * time.Second},
		{name: "clamped", body: []byte(`{"timeout_ms":18446744073709551615}`), wait: DefaultWait, timeout: MaxTimeout},
		{name: "past 2^64-1", body: []byte(`{"timeout_ms":99999999999999999999999}`), bad: "timeout_ms must be at most 18446744073709551615"},
		{name: "msgpack", body: msgpackOf(t, "timeout_ms", int64(250)), wait: 250 * time.Millisecond, timeout: 250 * time.Millisecond},
		{name: "negative", body: []byte(`{"timeout_ms":-1}`), bad: "timeout_ms must be a non-negative integer"},
		{name: "a string", body: []byte(`{"timeout_ms":"1000"}`), bad: "timeout_ms"},
		{name: "a fraction", body: []byte(`{"timeout_ms":0.5}`), bad: "timeout_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := parseRequest(tt.body, "")
			if tt.bad != "" {
				require.ErrorIs(t, err, errBadBody)
				require.ErrorContains(t, err, tt.bad)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wait, req.wait)
			require.Equal(t, tt.timeout, req.timeout)
		})
	}
}
