package integration

import (
	"flag"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// raceBinary builds the ctxd run as a process with the race detector: a
// race it finds makes it exit 66, which the tests that stop it see.
var raceBinary = flag.Bool("ctxd.race", false, "build the ctxd binary the tests run as processes with -race")

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

var readyLine = regexp.MustCompile(`^ctxd ready (nats://[^ ]+:\d+)$`)

// ctxdEnv adds variables to the environment of every ctxd process a test
// starts: -ctxd.env GOGC=200,GOMAXPROCS=1 measures a benchmark under
// other runtime settings without touching the test process's own.
var ctxdEnv = flag.String("ctxd.env", "", "comma-separated `KEY=VALUE` pairs added to the environment of the ctxd processes tests start")

// SIGTERM drains the service and exits 0; the records it acknowledged are
// served after a restart on the same store.
func TestProcess_SIGTERMDrainsAndExitsZero(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, "--port", "-1", "--data", dir)
	c := newClient(t, p.url)
	var last uint64
	for i := 0; i < 50; i++ {
		last = c.publish("term", []byte(fmt.Sprintf(`{"role":"user","content":"m%d"}`, i)))
	}
	r := c.fetchSeq("term", last, false)
	require.Len(t, r.Messages, 50)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t), "stderr: %s", p.stderr)
	require.Equal(t, 0, p.cmd.ProcessState.ExitCode())

	p2 := startProcess(t, "--port", "-1", "--data", dir)
	c2 := newClient(t, p2.url)
	r2 := c2.fetchSeq("term", last, true)
	require.Equal(t, last, r2.Seq)
	require.Len(t, r2.Messages, 50)
	require.NoError(t, p2.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, p2.wait(t))
}

// A killed ctxd, restarted on the same store, serves exactly what it
// served before.
func TestProcess_KilledAndRestartedServesTheSame(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, "--port", "-1", "--data", dir)
	c := newClient(t, p.url)
	before := map[string]string{}
	for i, fc := range loadFixtures(t) {
		s := sessionName("k", i, fc.Name)
		var seq uint64
		for _, r := range fc.Records {
			seq = c.publishValue(s, r, i%2 == 1)
		}
		if seq > 0 {
			c.fetchSeq(s, seq, false)
		}
		before[s] = string(c.request("ctxd.context."+s, nil, nil).Data)
	}
	require.NoError(t, p.cmd.Process.Kill())
	p.wait(t)

	p2 := startProcess(t, "--port", "-1", "--data", dir)
	c2 := newClient(t, p2.url)
	for s, want := range before {
		require.Equal(t, want, string(c2.request("ctxd.context."+s, nil, nil).Data), s)
	}
}

// The command line client: publish prints the last sequence, context
// reads the session back with --min-seq, rejected lists skipped records.
func TestProcess_PublishAndContextCommands(t *testing.T) {
	a := startApp(t, t.TempDir())
	bin := ctxdBinary(t)
	cmd := exec.Command(bin, "publish", "--nats", a.URL(), "--session", "cli", "../examples/session.jsonl")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	seq := strings.TrimSpace(string(out))
	require.Regexp(t, `^\d+$`, seq)

	cmd = exec.Command(bin, "context", "cli", "--min-seq", seq, "--nats", a.URL())
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	r := decodeReply(t, out)
	require.Equal(t, "cli", r.Session)
	require.Equal(t, seq, fmt.Sprint(r.Seq))
	want, err := exec.Command(bin, "build", "../examples/session.jsonl").Output()
	require.NoError(t, err)
	requireMessages(t, mustDecode(t, string(want)).([]any), r.Messages)

	cmd = exec.Command(bin, "publish", "--nats", a.URL(), "--session", "cli", "--msgpack", "-")
	cmd.Stdin = strings.NewReader(`{"role":"user","content":"packed"}` + "\n")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd = exec.Command(bin, "context", "cli", "--min-seq", strings.TrimSpace(string(out)), "--nats", a.URL())
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"packed"`)

	out, err = exec.Command(bin, "rejected", "--nats", a.URL()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "[]\n", string(out))

	// A wait that cannot be met is a 504, exit 1.
	cmd = exec.Command(bin, "context", "cli", "--min-seq", "999999", "--wait-ms", "100", "--nats", a.URL())
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "504")
}

// rebuild --check while records keep arriving ends consistent: it reads
// on past what it first rebuilt and finds no difference.
func TestProcess_RebuildCheckWhileWriting(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	for i, fc := range loadFixtures(t) {
		for _, r := range fc.Records {
			c.publishValue(sessionName("rb", i%5, "s"), r, false)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := newClient(t, a.URL())
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			w.publish(sessionName("rb", n%5, "s"), []byte(fmt.Sprintf(`{"role":"user","content":"live %d"}`, n)))
		}
	}()
	out, err := exec.Command(ctxdBinary(t), "rebuild", "--check", "--nats", a.URL()).CombinedOutput()
	close(stop)
	<-done
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "no differences (5 sessions)")

	// Rebuilt with other rules (no screenshot trimming), the sessions with
	// browser screenshots differ, and --check says which.
	out, err = exec.Command(ctxdBinary(t), "rebuild", "--check", "--browser-tools", "none", "--nats", a.URL()).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "differs: rb-")
	require.Contains(t, string(out), "differ from the running service")
}
