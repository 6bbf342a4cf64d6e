package protocol

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/edits"
)

// A request with edits writes and reads back to itself, in JSON and
// msgpack.
func TestRequest_EditsRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{Edits: &edits.Config{Thinking: &edits.Thinking{KeepTurns: 1}}},
		{BudgetTokens: 9000, HasBudget: true, Edits: &edits.Config{ToolResults: &edits.ToolResults{Keep: 3}}},
		{Format: "anthropic", Edits: &edits.Config{
			ToolResults: &edits.ToolResults{TriggerTokens: 100000, HasTrigger: true, Keep: 2, ClearAtLeastTokens: 20000, ExcludeTools: []string{"memory"}, ClearInputs: true},
			Images:      &edits.Images{Keep: 3, Batch: 10},
		}},
	} {
		for _, body := range [][]byte{r.AppendJSON(nil), r.AppendMsgpack(nil)} {
			got, err := ParseRequest(body)
			require.NoError(t, err, "%q", body)
			require.Equal(t, r, got, "%q", body)
		}
	}
	require.Equal(t, `{"min_seq":0,"edits":{"thinking":{"keep_turns":1}}}`,
		string(Request{Edits: &edits.Config{Thinking: &edits.Thinking{KeepTurns: 1}}}.AppendJSON(nil)))
}

// Every invalid shape of edits is a 400 naming the field.
func TestParseRequest_EditsRefused(t *testing.T) {
	for _, tt := range []struct{ body, has string }{
		{`{"edits":[]}`, "edits must be an object"},
		{`{"edits":{"screenshots":{}}}`, "edits.screenshots: unknown kind"},
		{`{"edits":{"thinking":{"keep_turns":-1}}}`, "edits.thinking.keep_turns must be a non-negative integer"},
		{`{"edits":{"images":{"batch":2.5}}}`, "edits.images.batch must be a non-negative integer"},
		{`{"edits":{"tool_results":{"keep":3,"exclude":["x"]}},"budget_tokens":5}`, "edits.tool_results.exclude: unknown field"},
		{`{"edits":{"tool_results":{}}}`, "edits.tool_results.trigger_tokens is required when the request has no budget_tokens"},
		{`{"edits":{"tool_results":{"keep":1}},"min_seq":3}`, "edits.tool_results.trigger_tokens is required"},
	} {
		_, err := ParseRequest([]byte(tt.body))
		require.ErrorIs(t, err, ErrBadRequest, tt.body)
		require.ErrorIs(t, err, edits.ErrInvalid, tt.body)
		require.ErrorContains(t, err, tt.has, tt.body)
	}
	// budget_tokens anywhere in the body is the trigger.
	r, err := ParseRequest([]byte(`{"edits":{"tool_results":{}},"budget_tokens":5}`))
	require.NoError(t, err)
	require.False(t, r.Edits.ToolResults.HasTrigger)
}

// Whatever edits parse write back to a body that parses to the same
// request.
func FuzzParseRequest_Edits(f *testing.F) {
	for _, s := range []string{
		`{"edits":{}}`,
		`{"budget_tokens":100,"edits":{"tool_results":{"keep":0,"exclude_tools":["a"]},"thinking":{},"images":{"batch":3}}}`,
		`{"edits":{"tool_results":{"trigger_tokens":5,"clear_inputs":true,"clear_at_least_tokens":1e3}}}`,
		"\x81\xa5edits\x81\xa8thinking\x80",
	} {
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
