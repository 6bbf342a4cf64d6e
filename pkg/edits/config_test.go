package edits_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/record"
)

// Parse fills in every default, and Map writes a config Parse reads back
// to itself.
func TestParse_DefaultsAndRoundTrip(t *testing.T) {
	c, err := edits.ParseJSON([]byte(`{"tool_results":{},"thinking":{},"images":{}}`))
	require.NoError(t, err)
	require.Equal(t, &edits.Config{
		ToolResults: &edits.ToolResults{Keep: 3},
		Thinking:    &edits.Thinking{KeepTurns: 1},
		Images:      &edits.Images{Keep: 3, Batch: 10},
	}, c)
	for _, in := range []string{
		`{}`,
		`{"tool_results":{"trigger_tokens":100000,"keep":0,"clear_at_least_tokens":20000,"exclude_tools":["memory","web_search"],"clear_inputs":true}}`,
		`{"tool_results":{"exclude_tools":[]},"images":{"keep":0,"batch":1}}`,
		`{"thinking":{"keep_turns":0}}`,
		`{"thinking":{"keep_turns":2.0}}`,
	} {
		c, err := edits.ParseJSON([]byte(in))
		require.NoError(t, err, in)
		b, err := record.MarshalJSON(c.Map())
		require.NoError(t, err)
		again, err := edits.ParseJSON(b)
		require.NoError(t, err, "%s", b)
		require.Equal(t, c, again, "%s", b)
	}
}

// Every invalid shape is refused with an error that wraps ErrInvalid and
// names the field.
func TestParse_Refused(t *testing.T) {
	for _, tt := range []struct{ in, has string }{
		{`[]`, "edits must be an object"},
		{`"clear"`, "edits must be an object"},
		{`{"tool_result":{}}`, "edits.tool_result: unknown kind"},
		{`{"clear_tool_uses_20250919":{}}`, "edits.clear_tool_uses_20250919: unknown kind"},
		{`{"tool_results":true}`, "edits.tool_results must be an object"},
		{`{"thinking":[]}`, "edits.thinking must be an object"},
		{`{"images":null}`, "edits.images must be an object"},
		{`{"tool_results":{"trigger":5}}`, "edits.tool_results.trigger: unknown field"},
		{`{"tool_results":{"trigger_tokens":-1}}`, "edits.tool_results.trigger_tokens must be a non-negative integer, got -1"},
		{`{"tool_results":{"trigger_tokens":1.5}}`, "edits.tool_results.trigger_tokens must be a non-negative integer, got 1.5"},
		{`{"tool_results":{"trigger_tokens":"5"}}`, "edits.tool_results.trigger_tokens must be a non-negative integer"},
		{`{"tool_results":{"trigger_tokens":1e300}}`, "edits.tool_results.trigger_tokens must be at most"},
		{`{"tool_results":{"keep":-3}}`, "edits.tool_results.keep must be a non-negative integer"},
		{`{"tool_results":{"keep":2147483648}}`, "edits.tool_results.keep must be at most 1073741824"},
		{`{"tool_results":{"clear_at_least_tokens":null}}`, "edits.tool_results.clear_at_least_tokens must be a non-negative integer"},
		{`{"tool_results":{"exclude_tools":"bash"}}`, "edits.tool_results.exclude_tools must be an array"},
		{`{"tool_results":{"exclude_tools":["bash",3]}}`, "edits.tool_results.exclude_tools[1] must be a string"},
		{`{"tool_results":{"exclude_tools":[` + strings.Repeat(`"a",`, 256) + `"a"]}}`, "edits.tool_results.exclude_tools has 257 names, at most 256"},
		{`{"tool_results":{"clear_inputs":"yes"}}`, "edits.tool_results.clear_inputs must be true or false"},
		{`{"thinking":{"keep_turns":-1}}`, "edits.thinking.keep_turns must be a non-negative integer"},
		{`{"thinking":{"keep":1}}`, "edits.thinking.keep: unknown field"},
		{`{"images":{"keep":1.25}}`, "edits.images.keep must be a non-negative integer"},
		{`{"images":{"batch":0}}`, "edits.images.batch must be at least 1"},
		{`{"images":{"every":2}}`, "edits.images.every: unknown field"},
		{`{"thinking":{}`, "not JSON"},
	} {
		_, err := edits.ParseJSON([]byte(tt.in))
		require.Error(t, err, tt.in)
		require.True(t, errors.Is(err, edits.ErrInvalid), "%s: %v", tt.in, err)
		require.Contains(t, err.Error(), tt.has, tt.in)
	}
}

// FuzzParse: no input panics Parse, and what it accepts Map writes back
// to the same config.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"tool_results":{"trigger_tokens":100000,"keep":3,"clear_at_least_tokens":20000,"exclude_tools":["memory"],"clear_inputs":true}}`,
		`{"thinking":{"keep_turns":1},"images":{"keep":3,"batch":10}}`,
		`{"images":{"batch":0}}`,
		`{"tool_results":{"keep":1e2}}`,
		`[{"thinking":{}}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := edits.ParseJSON(data)
		if err != nil {
			require.ErrorIs(t, err, edits.ErrInvalid)
			return
		}
		b, err := record.MarshalJSON(c.Map())
		require.NoError(t, err)
		again, err := edits.ParseJSON(b)
		require.NoError(t, err, "%s", b)
		require.Equal(t, c, again)
	})
}
