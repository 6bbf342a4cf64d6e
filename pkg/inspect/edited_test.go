package inspect_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/inspect"
)

// ?edits= shows the conversation with the context edits applied: each
// result cleared, and each message whose thinking was removed, marked
// with what the edits did; the page without it is unchanged. Invalid
// edits are a 400 naming the field.
func TestHandler_Edited(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	const subj = "transcripts.ed-1"
	in.publish(subj, m("role", "user", "content", "find the bug"))
	for i := range 5 {
		in.publish(subj,
			m("role", "assistant", "content", []any{m("type", "thinking", "thinking", fmt.Sprintf("thought %d", i), "signature", "s"),
				m("type", "toolCall", "id", fmt.Sprintf("c%d", i), "name", "read")}),
			m("role", "toolResult", "toolCallId", fmt.Sprintf("c%d", i), "toolName", "read", "content", strings.Repeat(fmt.Sprintf("line %d\n", i), 400)))
	}
	page := "/ui/sessions/ed-1"
	code, _, plain := in.get(page)
	require.Equal(t, http.StatusOK, code, plain)
	require.NotContains(t, plain, "edits:")

	q := url.Values{"edits": {`{"tool_results":{"trigger_tokens":100,"keep":2},"thinking":{"keep_turns":1}}`}}
	code, _, body := in.get(page + "?" + q.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 3, strings.Count(body, "edits: tool result cleared ("), "all but the 2 latest results")
	require.Equal(t, 4, strings.Count(body, "edits: thinking removed"), "all but the latest turn")
	require.Contains(t, body, "[tool result cleared: read c0, ")
	require.NotContains(t, body, "[tool result cleared: read c4, ")
	require.Contains(t, body, `st-edited`)

	for edits, has := range map[string]string{
		`{"tool_results":{"keep":2}}`:    "edits.tool_results.trigger_tokens is required",
		`{"thinking":{"keep_turns":-1}}`: "edits.thinking.keep_turns must be a non-negative integer",
		`{"images":`:                     "not JSON",
	} {
		code, _, body := in.get(page + "?" + url.Values{"edits": {edits}}.Encode())
		require.Equal(t, http.StatusBadRequest, code, edits)
		require.Contains(t, body, has, edits)
	}
}
