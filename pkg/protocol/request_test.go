package protocol

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A request written as JSON or msgpack parses back to itself.
func TestRequest_RoundTrip(t *testing.T) {
	for _, r := range []Request{
		{},
		{MinSeq: 15},
		{MinSeq: math.MaxUint64, WaitMS: 0, HasWait: true},
		{MinSeq: 7, WaitMS: 500, HasWait: true, TimeoutMS: 900, Format: "gemini", BudgetTokens: 9000, HasBudget: true},
		{Format: `a "quoted" é name`, HasBudget: true},
		{NoDigest: true},
		{AskDigest: true},
		{MinSeq: 3, HaveSeq: 9, HaveDigest: strings.Repeat("0a", 32), HasHave: true},
	} {
		for _, body := range [][]byte{r.AppendJSON(nil), r.AppendMsgpack(nil)} {
			got, err := ParseRequest(body)
			require.NoError(t, err, "%q", body)
			require.Equal(t, r, got, "%q", body)
		}
	}
	require.Equal(t, `{"min_seq":7,"wait_ms":500,"timeout_ms":900,"format":"gemini","budget_tokens":9000}`,
		string(Request{MinSeq: 7, WaitMS: 500, HasWait: true, TimeoutMS: 900, Format: "gemini", BudgetTokens: 9000, HasBudget: true}.AppendJSON(nil)))
}

// Wait and Timeout bound what the body says, and the wait never outlasts
// the client's timeout.
func TestRequest_WaitAndTimeout(t *testing.T) {
	require.Equal(t, DefaultWait, Request{}.Wait())
	require.Equal(t, time.Duration(0), Request{HasWait: true}.Wait(), "wait_ms 0: now or fail")
	require.Equal(t, MaxWait, Request{WaitMS: math.MaxUint64, HasWait: true}.Wait())
	require.Equal(t, 300*time.Millisecond, Request{TimeoutMS: 300}.Wait())
	require.Equal(t, MaxTimeout, Request{TimeoutMS: math.MaxUint64}.Timeout())
	require.Equal(t, time.Duration(0), Request{}.Timeout())
}

// Malformed, oversized and hostile bodies are refused with an error that
// wraps ErrBadRequest and names what is wrong.
func TestParseRequest_Refused(t *testing.T) {
	for _, tt := range []struct {
		body, has string
	}{
		{`[1,2]`, "not a JSON object or msgpack map"},
		{`hello`, "bad request body"},
		{`{"min_seq":-1}`, "min_seq must be a non-negative integer"},
		{`{"min_seq":1.5}`, "min_seq must be a non-negative integer"},
		{`{"min_seq":"5"}`, "min_seq must be a non-negative integer"},
		{`{"min_seq":18446744073709551616}`, "min_seq must be at most 18446744073709551615"},
		{`{"wait_ms":true}`, "wait_ms must be a non-negative integer"},
		{`{"timeout_ms":-5}`, "timeout_ms must be a non-negative integer"},
		{`{"budget_tokens":[]}`, "budget_tokens must be a non-negative integer"},
		{`{"format":7}`, "format must be a string"},
		{`{"digest":"yes"}`, "digest must be true or false"},
		{`{"digest":false,"have_seq":1,"have_digest":"` + strings.Repeat("a", 64) + `"}`, "digest false with have_seq and have_digest"},
		{`{"have_seq":1}`, "have_seq without have_digest"},
		{`{"have_digest":"` + strings.Repeat("a", 64) + `"}`, "have_digest without have_seq"},
		{`{"have_seq":-1,"have_digest":"` + strings.Repeat("a", 64) + `"}`, "have_seq must be a non-negative integer"},
		{`{"have_seq":1,"have_digest":"` + strings.Repeat("A", 64) + `"}`, "have_digest must be a digest of 64 lowercase hex digits"},
		{`{"have_seq":1,"have_digest":"` + strings.Repeat("a", 63) + `"}`, "have_digest must be a digest"},
		{`{"have_seq":1,"have_digest":null}`, "have_digest must be a digest"},
		{"\xef\xbb\xbf{}", "byte order mark"},
		{`{"a":` + strings.Repeat(`{"a":`, 20) + `1` + strings.Repeat(`}`, 21), "bad request body"},
		{`{"x":"` + strings.Repeat("a", MaxRequestSize) + `"}`, "at most 65536"},
	} {
		_, err := ParseRequest([]byte(tt.body))
		require.ErrorIs(t, err, ErrBadRequest, "%.60q", tt.body)
		require.ErrorContains(t, err, tt.has, "%.60q", tt.body)
	}
}

// Whatever parses writes back to a body that parses to the same request.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"min_seq":5,"wait_ms":0,"format":"anthropic"}`, `{"budget_tokens":1,"timeout_ms":2}`, "\x81\xa7min_seq\x05", `{"digest":true}`, `{"digest":false}`, `{"have_seq":4,"have_digest":"` + strings.Repeat("0f", 32) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseRequest(body)
		if err != nil {
			require.ErrorIs(t, err, ErrBadRequest)
			return
		}
		for _, again := range [][]byte{r.AppendJSON(nil), r.AppendMsgpack(nil)} {
			got, err := ParseRequest(again)
			require.NoError(t, err, "%q from %q", again, body)
			require.Equal(t, r, got)
		}
	})
}
