package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ctxd context --digest prints the digest; --have-seq and --have-digest
// print the raw delta against it; malformed ones are usage errors.
func TestContext_Delta(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	done := make(chan int)
	go func() {
		done <- run(ctx, &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }},
			[]string{"serve", "--port", "-1", "--data", t.TempDir()})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ctxd ready") }, 30*time.Second, 10*time.Millisecond, errOut.String())
	url := strings.TrimSpace(strings.TrimPrefix(out.String(), "ctxd ready "))

	publish := func(lines string) string {
		t.Helper()
		code, got, e := runCmd(t, lines, "publish", "--session", "s", "--nats", url)
		require.Equal(t, exitOK, code, e)
		return strings.TrimSpace(got)
	}
	type reply struct {
		Seq      uint64            `json:"seq"`
		Messages []json.RawMessage `json:"messages"`
		Digest   string            `json:"digest"`
		Delta    *struct {
			Keep int `json:"keep"`
		} `json:"delta"`
	}
	contextOf := func(args ...string) reply {
		t.Helper()
		code, got, e := runCmd(t, "", append([]string{"context", "s", "--nats", url}, args...)...)
		require.Equal(t, exitOK, code, e)
		var r reply
		require.NoError(t, json.Unmarshal([]byte(got), &r), got)
		return r
	}
	last := publish("{\"role\":\"user\",\"content\":\"one\"}\n{\"role\":\"assistant\",\"content\":\"two\"}\n")
	held := contextOf("--min-seq", last)
	require.Len(t, held.Digest, 64, "a reply carries its digest")
	require.Nil(t, held.Delta)
	require.Empty(t, contextOf("--min-seq", last, "--digest=false").Digest)
	last = publish(`{"role":"user","content":"three"}` + "\n")
	d := contextOf("--min-seq", last, "--have-seq", strconv.FormatUint(held.Seq, 10), "--have-digest", held.Digest)
	require.NotNil(t, d.Delta)
	require.Equal(t, 2, d.Delta.Keep)
	require.Len(t, d.Messages, 1)
	require.Contains(t, string(d.Messages[0]), "three")

	for _, args := range [][]string{
		{"--have-seq", "1"},
		{"--have-digest", held.Digest},
		{"--have-seq", "1", "--have-digest", "nope"},
		{"--have-seq", "1", "--have-digest", held.Digest, "--digest=false"},
	} {
		code, _, e := runCmd(t, "", append([]string{"context", "s", "--nats", url}, args...)...)
		require.Equal(t, exitUsage, code, args)
		require.Contains(t, e, "--have-", args)
	}
}
