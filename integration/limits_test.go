//go:build !slow

package integration

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/record"
)

// ctxd rebuild applies the service's record and session limits: a
// compaction too large for a session resets nothing and the records past
// the bound are quarantined, in the service and in the rebuild alike, so
// --check agrees with the service and the checkpoints written start where
// the service would.
func TestProcess_RebuildAppliesServiceLimits(t *testing.T) {
	const maxSession = 3000
	a := startApp(t, t.TempDir(), func(c *app.Config) { c.MaxSessionBytes = maxSession })
	c := newClient(t, a.URL())
	compaction := func(text string) any {
		return record.NewMap("type", "compaction", "at", "2026-01-01T00:00:00Z", "baseSeq", int64(1), "plannerVersion", int64(1),
			"summaryModelRef", "m", "summary", "s", "qualityAudit", "passed",
			"messages", []any{record.NewMap("role", "user", "content", text)},
			"firstKeptIndex", int64(0), "tokensBefore", int64(10), "tokensAfter", int64(5))
	}
	msg := func(i int) any {
		return record.NewMap("role", "user", "content", fmt.Sprintf("message %d %s", i, strings.Repeat("x", 300)))
	}

	var last uint64
	small := c.publishValue("limits", compaction("kept"), false)
	for i := range 3 {
		c.publishValue("limits", msg(i), false)
	}
	c.publishValue("limits", compaction(strings.Repeat("too large for a session ", 200)), false) // resets nothing
	for i := 3; i < 12; i++ {
		last = c.publishValue("limits", msg(i), false) // the last ones go past the bound: quarantined
	}
	r := c.fetchSeq("limits", last, false)
	require.Equal(t, last, r.Seq)
	require.NotEmpty(t, a.Store().Rejected(), "records past the session bound are quarantined")

	bin := ctxdBinary(t)
	out, err := exec.Command(bin, "rebuild", "--check", "--max-session-bytes", fmt.Sprint(maxSession), "--nats", a.URL()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "no differences (1 sessions)")

	// With other limits the rebuild is not the service's, and says so.
	out, err = exec.Command(bin, "rebuild", "--check", "--nats", a.URL()).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "differs: limits")

	out, err = exec.Command(bin, "rebuild", "--max-session-bytes", fmt.Sprint(maxSession), "--nats", a.URL()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bucket, err := bus.OpenCheckpoints(ctx, c.js, 0)
	require.NoError(t, err)
	cp, ok, err := bucket.Get(ctx, "limits")
	require.NoError(t, err)
	require.True(t, ok)
	// The service may have written it first, with the session's record
	// index; the rebuild's, without one, does not replace that.
	require.Equal(t, [2]uint64{small, last}, [2]uint64{cp.From, cp.Seq}, "the checkpoint starts at the compaction the service restarted from")
}
