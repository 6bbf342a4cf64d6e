package leakcheck

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func block(stop chan struct{}) { <-stop }

// A goroutine running ctxd's code is found until it ends.
func TestRunning(t *testing.T) {
	stop := make(chan struct{})
	go block(stop)
	blocked := func() (n int) {
		for _, g := range Running() {
			if strings.Contains(g, "leakcheck.block(") {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return blocked() == 1 }, 5*time.Second, 10*time.Millisecond)
	close(stop)
	require.Eventually(t, func() bool { return blocked() == 0 }, 5*time.Second, 10*time.Millisecond)
}

func TestOurs(t *testing.T) {
	require.False(t, ours("goroutine 7 [select]:\ngithub.com/nats-io/nats-server/v2/server.(*Server).run()\n\t/x.go:1\ncreated by github.com/ctxd/ctxd/pkg/natsd.Start in goroutine 6\n\t/y.go:2"))
	require.True(t, ours("goroutine 8 [chan receive]:\ngithub.com/ctxd/ctxd/pkg/app.(*App).run()\n\t/x.go:1"))
}
