package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// ctxd soak refuses a shape it cannot run, naming the flag.
func TestSoak_Flags(t *testing.T) {
	for flag, args := range map[string][]string{
		"--agents":   {"--agents", "0"},
		"--duration": {"--duration", "0s"},
		"--window":   {"--window", "0s"},
		"--idle":     {"--idle", "-1s"},
		"--max-sent": {"--max-sent", "-1"},
	} {
		code, _, errOut := runCmd(t, "", append([]string{"soak"}, args...)...)
		require.Equal(t, exitUsage, code, errOut)
		require.Contains(t, errOut, flag)
	}
}
