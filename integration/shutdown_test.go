//go:build !slow

package integration

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SIGTERM with many sessions in memory ends within the shutdown deadline
// and exits 0: the checkpoints are written in bulk, and those not written
// in time are counted in one line, not reported one by one (a checkpoint
// is a hint; a session without one loads from the stream).
func TestProcess_ShutdownManySessions(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, "--port", "-1", "--data", dir)
	c := newClient(t, p.url)
	n := *shutdownSessions
	last := fillSessions(t, c.js, n)
	waitIngest(t, c, fmt.Sprintf("many%d", n-1), last)

	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	err := p.wait(t)
	took := time.Since(start)
	stderr := p.stderr.String()
	t.Logf("%d sessions: shutdown took %v, exit %d", n, took, p.cmd.ProcessState.ExitCode())
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	var deadline int
	for _, l := range lines {
		if strings.Contains(l, "deadline exceeded") {
			deadline++
		}
		if strings.Contains(l, "checkpoints") {
			t.Log(l)
		}
	}
	t.Logf("%d stderr lines, %d with 'deadline exceeded'; last: %s", len(lines), deadline, lines[len(lines)-1])
	require.NoError(t, err, "tail of stderr: %s", tail(stderr, 2000))
	require.LessOrEqual(t, deadline, 1, "one line says what was not written")
	require.Contains(t, stderr, "checkpoints at shutdown")

	// Every session is served after a restart, with or without its
	// checkpoint.
	p2 := startProcess(t, "--port", "-1", "--data", dir)
	c2 := newClient(t, p2.url)
	for _, s := range []int{0, n / 2, n - 1} {
		r := c2.fetchSeq(fmt.Sprintf("many%d", s), 0, false)
		require.Len(t, r.Messages, 1)
	}
	require.NoError(t, p2.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p2.wait(t))
}

// waitIngest waits until session is served at seq: the ingest has
// applied every record up to it.
func waitIngest(t testing.TB, c *client, session string, seq uint64) {
	t.Helper()
	body := []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":10000}`, seq))
	require.Eventually(t, func() bool {
		r, serr := c.fetch(session, body, nil)
		return serr == nil && r.Seq >= seq
	}, 3*time.Minute, 10*time.Millisecond)
}
