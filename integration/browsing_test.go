//go:build !slow

package integration

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
)

// A browsing session applied as its records come, a user's message and
// 50 browser_use calls each answered with a 75 KB PNG: ctxd holds about
// its context, not its 5 MB of records, and at shutdown writes its
// snapshot, from which the next start loads it.
func TestRestart_BrowsingSessionBySnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := natstest.Start(t)
	dir := t.TempDir()
	a := startApp(t, dir, func(c *app.Config) { c.NATSURL = url })
	c := newClient(t, url)
	last := c.publish("web", []byte(`{"role":"user","content":"find the cheapest flight to Lisbon"}`))
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	c.fetchChecked("web", "loaded", 0) // the rest is applied as it comes

	png := make([]byte, 75_000)
	for i := range 50 {
		_, _ = rand.Read(png)
		c.publish("web", fmt.Appendf(nil, `{"role":"assistant","content":[{"type":"toolCall","id":"c%d","name":"browser_use","arguments":{"action":"click"}}]}`, i))
		last = c.publish("web", fmt.Appendf(nil, `{"role":"toolResult","toolCallId":"c%d","toolName":"browser_use","content":[{"type":"text","text":"clicked"},{"type":"image","data":%q,"mimeType":"image/png"}]}`,
			i, base64.StdEncoding.EncodeToString(png)))
	}
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	held := a.Stats().Bytes
	require.NoError(t, a.Close())
	require.Len(t, snapshotKeys(t, c.js), 1, "the session's snapshot is written")

	a = startApp(t, dir, func(c *app.Config) { c.NATSURL = url })
	c.fetchChecked("web", "restarted", 0)
	require.Equal(t, uint64(1), a.Stats().SnapshotLoads, "loaded from its snapshot")
	msg := c.request("ctxd.context.web", []byte(`{}`), nil)
	require.Empty(t, msg.Header.Get(micro.ErrorCodeHeader))
	reply := int64(len(msg.Data))
	served := a.Stats().Bytes
	t.Logf("reply %d bytes; held %d before the shutdown, %d once served", reply, held, served)
	require.LessOrEqual(t, held, 2*reply, "held as applied")
	require.LessOrEqual(t, served, reply*3/2, "held once served")
	require.NoError(t, a.Close())
}
