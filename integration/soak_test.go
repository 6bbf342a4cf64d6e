//go:build !slow

package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/perf"
)

// A short soak of a real ctxd serve process: agents in a closed loop over
// browsing sessions, every reply checked against the agents' own
// projections of what they published (its seq, its message count, and
// here every one message by message, each put back together from the
// delta sent against the agent's last reply), and a row of memory
// figures. It
// asserts correctness only; ctxd soak measures the figures
// (docs/PERFORMANCE.md).
func TestSoak_Short(t *testing.T) {
	cfg := perf.DefaultSoak()
	cfg.Command = []string{ctxdBinary(t), "serve", "--cache-bytes", "67108864"}
	cfg.Dir = t.TempDir()
	cfg.Sessions, cfg.Agents = 6, 3
	cfg.ScreenshotEvery, cfg.ScreenshotBytes = 3, 20_000
	cfg.Duration, cfg.Turns = 0, 40
	cfg.Window = time.Hour // one row, when the turns are done
	cfg.Idle = 0
	cfg.CheckEvery, cfg.BareEvery = 1, 2
	cfg.MaxRatio = 0 // timing is not judged here
	cfg.Delta = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := perf.Soak(ctx, cfg)
	require.NoError(t, err)
	require.Zero(t, rep.ErrCount, "errors: %q", rep.Errors)
	require.Equal(t, 3*40, rep.Turns)
	require.Equal(t, 3*40, rep.Checked, "every reply compared message by message")
	require.Len(t, rep.Windows, 1)
	w := rep.Windows[0]
	require.Equal(t, 3*40, w.Turns)
	require.Positive(t, w.RSS, "the process's RSS is read")
	require.Positive(t, w.HeapInUse, "its heap is scraped")
	require.Positive(t, w.CacheBytes, "its projections' bytes are scraped")
	require.Positive(t, w.Disk, "its data directory is measured")
	require.Positive(t, w.RecordBytes, "the turns' records are counted")
	require.Less(t, w.SentBytes, w.ReplyBytes, "replies sent as deltas against the agents' last ones")
	require.Empty(t, rep.Missed())
}
