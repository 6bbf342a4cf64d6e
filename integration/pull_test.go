//go:build slow

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/record"
)

// A server whose max_pending (the bytes it queues for one client before
// it cuts it off as a slow consumer) is below what one pull of the
// ingest could ask for: ctxd must still take a backlog larger than that,
// apply every record, and answer every fetch right, rather than be cut
// off again at every pull. The backlog is many pulls of the old size;
// the records are small enough that the direct gets a session's load
// keeps in flight (at most 128 at a time) fit beside a pull.
func TestProcess_IngestFitsServerMaxPending(t *testing.T) {
	const maxPending = 3 << 20
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("max_pending: %d\nmax_payload: %d\n", maxPending, 1<<20)), 0o600))
	url := natstest.Start(t, func(s *natsd.Server) { s.ConfigFile = conf })

	var disconnects atomic.Int64
	// The first instance creates the stream and its ingest consumer, and
	// stops: the records below wait for the next one as a backlog.
	first := startApp(t, t.TempDir(), func(c *app.Config) { c.NATSURL = url })
	require.NoError(t, first.Close())

	c := newClient(t, url)
	const sessions, perSession = 64, 100
	body := strings.Repeat("x", 8<<10)
	last := map[string]uint64{}
	var acks []jetstream.PubAckFuture
	var names []string
	for i := range perSession {
		for s := range sessions {
			name := fmt.Sprintf("pending-%d", s)
			data, err := record.MarshalJSON(record.NewMap("role", "user", "content", fmt.Sprintf("%d %s", i, body)))
			require.NoError(t, err)
			ack, err := c.js.PublishAsync("transcripts."+name, data)
			require.NoError(t, err)
			acks, names = append(acks, ack), append(names, name)
		}
	}
	for i, ack := range acks {
		select {
		case pa := <-ack.Ok():
			last[names[i]] = pa.Sequence
		case err := <-ack.Err():
			require.NoError(t, err)
		}
	}
	end := last[fmt.Sprintf("pending-%d", sessions-1)]
	require.Greater(t, int(end)*len(body), 3*maxPending, "the backlog is larger than max_pending")

	a := startApp(t, t.TempDir(), func(c *app.Config) {
		c.NATSURL = url
		c.NATSOptions = append(c.NATSOptions, nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			t.Logf("ctxd disconnected: %v", err)
			disconnects.Add(1)
		}))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, a.Wait(ctx, end, 90*time.Second), "the ingest applies the backlog")
	for s := range sessions {
		name := fmt.Sprintf("pending-%d", s)
		r := c.fetchSeq(name, last[name], false)
		require.Equal(t, last[name], r.Seq)
		require.Len(t, r.Messages, perSession, name)
		for i, m := range r.Messages {
			content, _ := m.(*record.Map).Get("content")
			require.Equal(t, fmt.Sprintf("%d %s", i, body), content, "%s message %d", name, i)
		}
	}
	require.Zero(t, disconnects.Load(), "ctxd was never cut off")
}
