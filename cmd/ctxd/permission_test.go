package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// TestCLI_PermissionViolation: a user the server does not let use the
// subjects a command needs (here, no JetStream API and no ctxd.rejected)
// gets an error that names the subject and the permission, at once,
// instead of a wait until a timeout.
func TestCLI_PermissionViolation(t *testing.T) {
	url := authServer(t, `authorization { users = [
  {user: admin, password: pw}
  {user: app, password: pw, permissions: {
    publish: {allow: ["transcripts.>", "ctxd.context.>"]}
    subscribe: {allow: ["_INBOX_app.>"]} }}
] }`)
	ensureStream(t, url, nats.UserInfo("admin", "pw"))
	as := []string{"--nats", url, "--user", "app", "--password", "pw", "--inbox-prefix", "_INBOX_app"}
	cases := []struct {
		name    string
		args    []string
		subject string
	}{
		{"inspect", []string{"inspect", "demo"}, `"$JS.API.`},
		{"import", []string{"import", "--from", "pi", samples + "pi/session-01.jsonl"}, `"$JS.API.`},
		{"rebuild", []string{"rebuild"}, `"$JS.API.`},
		{"rejected", []string{"rejected"}, `"ctxd.rejected"`},
		{"routed context", []string{"context", "demo", "--partitions", "4"}, `"ctxd.p.`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The bound of a command that would hang: the test fails
			// on what it prints, not on the time it took.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
			code := run(ctx, e, append(c.args, as...))
			require.Equal(t, exitFailure, code, errOut.String())
			require.Contains(t, errOut.String(), c.subject)
			require.Contains(t, errOut.String(), "may not publish to")
			require.NotContains(t, errOut.String(), "is ctxd serve running")
			require.NotContains(t, errOut.String(), "interrupted")
		})
	}
}

// silentServer runs a NATS server without JetStream where subscribers
// swallow every request on subjects: whatever is asked there is never
// answered.
func silentServer(t *testing.T, subjects ...string) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go s.Start()
	t.Cleanup(s.Shutdown)
	require.True(t, s.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	for _, subj := range subjects {
		_, err := nc.Subscribe(subj, func(*nats.Msg) {})
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	return s.ClientURL()
}

// TestCLI_Timeout: a command whose requests are never answered stops
// after its --timeout, and says so; serve's start after --start-timeout.
func TestCLI_Timeout(t *testing.T) {
	url := silentServer(t, "ctxd.rejected", "$JS.API.>")
	cases := [][]string{
		{"rejected", "--timeout", "300ms"},
		{"inspect", "demo", "--timeout", "300ms"},
		{"rebuild", "--timeout", "300ms"},
		{"publish", "--session", "demo", "--timeout", "300ms"},
	}
	for _, args := range cases {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			e := &env{stdin: strings.NewReader(`{"role":"user","content":"hi"}`), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
			code := run(ctx, e, append(args, "--nats", url))
			require.Equal(t, exitFailure, code, errOut.String())
			require.Contains(t, errOut.String(), "not done within --timeout 300ms")
		})
	}
	t.Run("serve", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
		code := run(ctx, e, []string{"serve", "--nats", url, "--start-timeout", "1s"})
		require.Equal(t, exitFailure, code, errOut.String())
		require.Contains(t, errOut.String(), "not done within --start-timeout 1s")
	})
	t.Run("a negative one", func(t *testing.T) {
		code, _, errOut := runCmd(t, "", "rejected", "--timeout", "-1s")
		require.Equal(t, exitUsage, code, errOut)
	})
}
