package app

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
)

// appGoroutines returns the stacks of the goroutines running code of
// this package, but the test's own.
func appGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "ctxd/pkg/app.") && !strings.Contains(g, "testing.tRunner") {
			out = append(out, g)
		}
	}
	return out
}

// Close ends the background work under way (its context is cancelled)
// and waits for it: no goroutine it started outlives it, even one
// emptying the snapshot bucket at that moment.
func TestApp_CloseJoinsGoroutines(t *testing.T) {
	for _, partitions := range []int{1, 4} {
		t.Run(fmt.Sprintf("partitions=%d", partitions), func(t *testing.T) {
			url := natstest.Start(t)
			cfg := DefaultConfig()
			cfg.NATSURL, cfg.Partitions = url, partitions
			a := New(cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			require.NoError(t, a.Open(ctx))
			// Records applied: the ingests hold their pins.
			nc := natstest.Connect(t, url)
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			var last uint64
			for i := range 8 {
				ack, err := js.Publish(ctx, fmt.Sprintf("transcripts.s%d", i), []byte(`{"role":"user","content":"x"}`))
				require.NoError(t, err)
				last = ack.Sequence
			}
			require.Eventually(t, func() bool { return a.Stats().Applied >= last || len(a.roles.Owned()) == partitions }, 30*time.Second, 10*time.Millisecond)

			entered := make(chan struct{})
			var ended atomic.Bool
			a.emptySnapshots = func(ctx context.Context) {
				close(entered)
				<-ctx.Done() // a request the server does not answer
				ended.Store(true)
			}
			a.dropSnapshots()
			<-entered
			require.NoError(t, a.Close())
			require.True(t, ended.Load(), "Close returned before the snapshots' emptying ended")
			require.Empty(t, appGoroutines(), "goroutines of the app after Close")
		})
	}
}
