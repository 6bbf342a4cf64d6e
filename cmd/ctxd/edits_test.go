package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// --edits is checked before anything is sent: a usage error naming the
// field.
func TestContext_EditsRefused(t *testing.T) {
	for _, tt := range []struct {
		args []string
		has  string
	}{
		{[]string{"--edits", `{"thinking":{"keep_turns":-1}}`}, "--edits: invalid edits: edits.thinking.keep_turns must be a non-negative integer"},
		{[]string{"--edits", `{"tool_results":{}}`}, "edits.tool_results.trigger_tokens is required without --budget-tokens"},
		{[]string{"--edits", `{"screenshots":{}}`}, "edits.screenshots: unknown kind"},
		{[]string{"--edits", `{"images":`}, "--edits: invalid edits: not JSON"},
	} {
		code, _, errOut := runCmd(t, "", append([]string{"context", "s", "--nats", "nats://127.0.0.1:1"}, tt.args...)...)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, tt.has)
	}
	code, out, errOut := runCmd(t, "", "context", "--help")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out+errOut, "--edits")
}
