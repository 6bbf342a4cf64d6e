package app

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A start and a clean stop say what happened at the level it deserves:
// nothing is a warning, and an empty snapshot bucket is not "emptied"
// at every start.
func TestLogs_CleanStartAndStop(t *testing.T) {
	dir := t.TempDir()
	for round := range 2 {
		var logs lockedBuffer
		cfg := DefaultConfig()
		cfg.DataDir, cfg.Port = dir, -1
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		a := New(cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, a.Open(ctx))
		// The instance takes the pin with the first record.
		require.NoError(t, a.nc.Publish("transcripts.s", []byte(`{"role":"user","content":"hi"}`)))
		require.Eventually(t, func() bool { return a.roles.IngestStore() != nil }, 20*time.Second, 10*time.Millisecond)
		require.NoError(t, a.Close())
		cancel()
		out := logs.String()
		require.NotContains(t, out, "level=WARN", "round %d:\n%s", round, out)
		require.NotContains(t, out, "snapshots emptied", "round %d:\n%s", round, out)
		require.True(t, strings.Contains(out, "ingest pin lost") || round > 0, "round %d:\n%s", round, out)
	}
}
