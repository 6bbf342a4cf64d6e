package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
)

func TestCLI_NoArguments(t *testing.T) {
	code, out, errOut := runCmd(t, "")
	require.Equal(t, exitUsage, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "Usage:")
}

func TestCLI_Version(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runCmd(t, "", args...)
		require.Equal(t, exitOK, code)
		require.Regexp(t, `^ctxd \S+.* go1\.`, out)
	}
	require.Regexp(t, regexp.MustCompile(`^\d+\.\d+\.\d+`), serviceVersion(), "semantic, as $SRV.INFO wants it")
}

// Every command refuses arguments it does not take.
func TestCLI_ExtraArguments(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "x"}, {"rejected", "x"}, {"rebuild", "x"}, {"bench", "x"}, {"soak", "x"}, {"version", "x"},
		{"context", "a", "b"}, {"publish", "--session", "s", "a", "b"},
	} {
		code, _, errOut := runCmd(t, "", args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
	}
}

func TestCLI_HelpFlagForm(t *testing.T) {
	for _, c := range commands {
		code, _, errOut := runCmd(t, "", c.name, "--help")
		require.Equal(t, exitOK, code, c.name)
		require.NotRegexp(t, `(?m)^  -[a-z]`, errOut, "%s: flags in the --flag form", c.name)
	}
	_, _, errOut := runCmd(t, "", "serve", "--help")
	require.Contains(t, errOut, "--sync POLICY")
	require.NotContains(t, errOut, "--sync always")
}

// CTXD_<FLAG> works for every command, not only serve; the command line
// wins; a bad value is a usage error.
func TestCLI_EnvEveryCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut,
		getenv: func(k string) string { return map[string]string{"CTXD_MIN_SEQ": "nope"}[k] }}
	require.Equal(t, exitUsage, run(context.Background(), e, []string{"context", "s"}))
	require.Contains(t, errOut.String(), "CTXD_MIN_SEQ")

	code, out2, errOut2 := runCmdEnv(t, map[string]string{"CTXD_DROPPED": "true"}, `{"role":"user","content":"hi"}`, "build")
	require.Equal(t, exitOK, code, errOut2)
	require.Contains(t, out2, `"dropped"`)
}

func TestCLI_MaxPayloadRange(t *testing.T) {
	for _, v := range []string{"0", "-1", "67108865", "4294967296"} {
		code, _, errOut := runCmd(t, "", "serve", "--max-payload", v, "--data", t.TempDir())
		require.Equal(t, exitUsage, code, v)
		require.Contains(t, errOut, "--max-payload", v)
	}
}

func TestCLI_HTTPHosts(t *testing.T) {
	for _, v := range []string{"http://ctxd.example.com", "ctxd.example.com:9090", "a b"} {
		code, _, errOut := runCmd(t, "", "serve", "--http", "127.0.0.1:0", "--http-hosts", v, "--data", t.TempDir())
		require.Equal(t, exitUsage, code, v)
		require.Contains(t, errOut, "--http-hosts: want host names without scheme or port", v)
	}
}

// A port in use fails at once (not after 30 s) and says so.
func TestCLI_PortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	start := time.Now()
	code, _, errOut := runCmd(t, "", "serve", "--port", strconv.Itoa(port), "--data", t.TempDir())
	require.Equal(t, exitFailure, code)
	// The listener's failure is the error (not a wait for readiness that
	// times out, with the failure only logged).
	require.Regexp(t, `(?m)^ctxd serve: natsd: Error listening on port: .*address already in use`, errOut)
	t.Logf("failed after %s", time.Since(start))
}

// Interrupted while waiting: exit 130.
func TestCLI_Interrupted(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	done := make(chan int)
	go func() {
		done <- run(ctx, e, []string{"context", "s", "--nats", url, "--min-seq", "99", "--wait-ms", "30000"})
	}()
	cancel()
	require.Equal(t, exitInterrupted, <-done, errOut.String())
}

// An embedded server beyond loopback needs authentication.
func TestCLI_EmbeddedExposed(t *testing.T) {
	code, _, errOut := runCmd(t, "", "serve", "--host", "0.0.0.0", "--port", "-1", "--data", t.TempDir())
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "--nats-config")
}

func runCmdEnv(t *testing.T, vars map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] }}
	code := run(context.Background(), e, args)
	return code, out.String(), errOut.String()
}

// serve tells systemd it is ready, on NOTIFY_SOCKET.
func TestServe_NotifiesSystemd(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	done := make(chan int)
	go func() {
		done <- run(ctx, &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut,
			getenv: func(k string) string { return map[string]string{"NOTIFY_SOCKET": sock}[k] }},
			[]string{"serve", "--port", "-1", "--data", t.TempDir()})
	}()
	buf := make([]byte, 64)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	n, err := conn.Read(buf)
	require.NoError(t, err, errOut.String())
	require.Equal(t, "READY=1", string(buf[:n]))
	require.Contains(t, out.String(), "ctxd ready")
	cancel()
	n, err = conn.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "STOPPING=1", string(buf[:n]))
	require.Equal(t, 0, <-done)
}

// The embedded server beyond loopback with deployments/nats/auth.conf:
// ctxd connects as its user, and a client without a password is refused.
func TestServe_EmbeddedWithAuth(t *testing.T) {
	vars := map[string]string{"CTXD_PASSWORD": "ctxd-pw", "APP_PASSWORD": "app-pw", "OPERATOR_PASSWORD": "operator-pw"}
	for k, v := range vars {
		t.Setenv(k, v) // nats-server reads them from the process environment
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	done := make(chan int)
	go func() {
		done <- run(ctx, &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(k string) string { return vars[k] }},
			[]string{"serve", "--host", "0.0.0.0", "--port", "-1", "--data", t.TempDir(),
				"--nats-config", filepath.Join("..", "..", "deployments", "nats", "auth.conf"), "--user", "ctxd", "--inbox-prefix", "_INBOX_ctxd"})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "ctxd ready") }, 30*time.Second, 10*time.Millisecond, errOut.String())
	url := strings.TrimSpace(strings.TrimPrefix(out.String(), "ctxd ready "))
	url = strings.Replace(url, "ctxd:xxxxx@", "", 1)
	code, _, errOut2 := runCmd(t, "", "context", "s", "--nats", url)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut2, "Authorization Violation")
	code, _, errOut2 = runCmdEnv(t, map[string]string{"CTXD_USER": "app", "CTXD_PASSWORD": "app-pw"}, "", "context", "s", "--nats", url)
	require.Equal(t, exitFailure, code, "the application's user may not subscribe to nats.go's default inbox")
	require.Contains(t, errOut2, "--inbox-prefix")
	code, got, errOut2 := runCmdEnv(t, map[string]string{"CTXD_USER": "app", "CTXD_PASSWORD": "app-pw", "CTXD_INBOX_PREFIX": "_INBOX_app"}, "", "context", "s", "--nats", url)
	require.Equal(t, exitOK, code, errOut2)
	require.Contains(t, got, `"seq":0`)
	cancel()
	require.Equal(t, 0, <-done)
	require.NotContains(t, out.String()+errOut.String(), "ctxd-pw")
}

// Ctrl-C while serve waits for JetStream to answer: exit 130 at once.
func TestServe_InterruptedWhileStarting(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(ns.Shutdown)

	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	done := make(chan int)
	go func() {
		done <- run(ctx, &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }},
			[]string{"serve", "--nats", ns.ClientURL()})
	}()
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "retrying") }, 30*time.Second, 5*time.Millisecond)
	cancel()
	require.Equal(t, exitInterrupted, <-done, errOut.String())
	require.NotContains(t, out.String(), "ctxd ready")
}

// Help never shows a password, even one in NATS_URL.
func TestCLI_HelpRedactsURL(t *testing.T) {
	code, _, errOut := runCmdEnv(t, map[string]string{"NATS_URL": "nats://u:hunter2@h:4222", "CTXD_PASSWORD": "pw2"}, "", "context", "--help")
	require.Equal(t, exitOK, code)
	require.NotContains(t, errOut, "hunter2")
	require.NotContains(t, errOut, "pw2")
	require.Contains(t, errOut, "nats://u:xxxxx@h:4222")
	require.Contains(t, errOut, "--budget-tokens as CTXD_BUDGET_TOKENS")
}

// The request ctxd context sends carries --wait-ms as given: 0 asks for
// an answer now or a 504, not the service's default wait; a negative
// one is a usage error, and nothing is sent.
func TestCLI_ContextWaitMS(t *testing.T) {
	url := natstest.Start(t)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	bodies := make(chan string, 8)
	_, err = nc.Subscribe("ctxd.context.s", func(m *nats.Msg) {
		bodies <- string(m.Data)
		m.Respond([]byte(`{"session":"s","seq":0,"messages":[]}`))
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	for _, tt := range []struct {
		args []string
		body string
	}{
		{[]string{"--min-seq", "5", "--wait-ms", "0"}, `{"min_seq":5,"wait_ms":0}`},
		{[]string{"--wait-ms", "0"}, `{"min_seq":0,"wait_ms":0}`},
		{[]string{"--min-seq", "5", "--wait-ms", "250"}, `{"min_seq":5,"wait_ms":250}`},
		{[]string{"--min-seq", "5"}, `{"min_seq":5,"wait_ms":2000}`},
		{nil, `{"min_seq":0,"wait_ms":2000}`},
	} {
		code, out, errOut := runCmd(t, "", append([]string{"context", "s", "--nats", url}, tt.args...)...)
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, out, `"session":"s"`)
		// The body also says how long the command waits for the reply
		// (its --timeout, less a margin for the way back).
		body := <-bodies
		timeoutMS := regexp.MustCompile(`,"timeout_ms":[0-9]+`)
		require.Regexp(t, timeoutMS, body, "%v", tt.args)
		require.Equal(t, tt.body, timeoutMS.ReplaceAllString(body, ""), "%v", tt.args)
	}

	code, _, errOut := runCmd(t, "", "context", "s", "--nats", url, "--wait-ms", "-1")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "ctxd context: --wait-ms must be 0 or more, got -1")
	code, _, errOut = runCmd(t, "", "context", "s", "--nats", url, "--hedge-ms", "-2")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "ctxd context: --hedge-ms must be -1 (never), 0 (the default) or more, got -2")
	require.Empty(t, bodies, "nothing is sent")
}

// TestCLI_BadValues: a bad value on the command line is a usage error
// (exit 2), found before anything connects (no server runs here), and a
// flag is named as it is written, --flag.
func TestCLI_BadValues(t *testing.T) {
	cases := []struct {
		args []string
		err  string
	}{
		{[]string{"context", "bad id!"}, "invalid session id"},
		{[]string{"context", "s", "--format", "bogus"}, `--format: unknown format "bogus"`},
		{[]string{"build", "--format", "bogus"}, `--format: unknown format "bogus"`},
		{[]string{"inspect", "bad id!"}, "invalid session id"},
		{[]string{"rebuild", "--session", "a.b"}, "invalid session id"},
		{[]string{"context", "s", "--min-seq", "x"}, `invalid value "x" for flag --min-seq`},
		{[]string{"context", "s", "--no-such-flag"}, "flag provided but not defined: --no-such-flag"},
		{[]string{"publish", "--session"}, "flag needs an argument: --session"},
		{[]string{"inspect", "s", "--json=maybe"}, "for --json"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, _, errOut := runCmdEnv(t, map[string]string{"NATS_URL": "nats://127.0.0.1:1"}, "", c.args...)
			require.Equal(t, exitUsage, code, errOut)
			require.Contains(t, errOut, c.err)
			require.NotRegexp(t, `(^|\s)-[a-z]`, strings.SplitN(errOut, "\n", 2)[0], "the flag in its --flag form")
		})
	}
}

// TestCLI_JSONIndentedOnTerminal: JSON output is indented for a
// terminal, compact for a pipe or a file.
func TestCLI_JSONIndentedOnTerminal(t *testing.T) {
	in := `{"role":"user","content":"hi"}` + "\n"
	code, out, errOut := runCmd(t, in, "build")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, `[{"role":"user","content":"hi"}]`+"\n", out)

	var stdout, stderr bytes.Buffer
	e := &env{stdin: strings.NewReader(in), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" },
		terminal: func(io.Writer) bool { return true }}
	require.Equal(t, 0, run(context.Background(), e, []string{"build"}), stderr.String())
	require.Equal(t, "[\n  {\n    \"role\": \"user\",\n    \"content\": \"hi\"\n  }\n]\n", stdout.String())
}

// TestCLI_HelpTexts: a command offers only the flags it uses, and the
// help of each says what it does in full.
func TestCLI_HelpTexts(t *testing.T) {
	_, _, errOut := runCmd(t, "", "build", "--help")
	require.NotContains(t, errOut, "--nats", "build connects to nothing")
	require.NotContains(t, errOut, "unused")

	_, _, errOut = runCmd(t, "", "serve", "--help")
	flags := map[string]string{}
	for _, block := range strings.Split(errOut, "\n  --")[1:] {
		name, usage, _ := strings.Cut(block, "\n")
		flags[strings.Fields(name)[0]] = strings.TrimSpace(usage)
	}
	require.Contains(t, flags["http"], "/ui/")
	require.Contains(t, flags["http-token"], "/ui/")
	require.Contains(t, flags["http-token"], "/metrics")
	require.Regexp(t, `\.$`, flags["allow-stream-limits"], "a whole sentence")
	require.Contains(t, flags["start-timeout"], "(default 5m0s)")
}
