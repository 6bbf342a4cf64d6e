//go:build !slow

package integration

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/record"
)

// TestPartition_WhileInstancesRun: an instance reads a session on the
// subjects of the stream's layout as it started; records stored after
// `ctxd partition` go to subjects it never reads. So ctxd partition
// refuses while instances of the stream answer, naming them; and an
// instance that meets the change anyway (here the stream is updated
// behind the command's back) stops answering and fails, instead of
// serving contexts without the records stored since.
func TestPartition_WhileInstancesRun(t *testing.T) {
	url := natstest.Start(t)
	ingest := startApp(t, t.TempDir(), func(c *app.Config) { c.NATSURL = url; c.Instance = "first" })
	c := newClient(t, url)
	seq := c.publishValue("s1", record.NewMap("role", "user", "content", "one"), false)
	c.fetchSeq("s1", seq, false)
	reader := startApp(t, t.TempDir(), func(c *app.Config) { c.NATSURL = url; c.Instance = "second" })

	out, err := exec.Command(ctxdBinary(t), "partition", "--partitions", "4", "--nats", url).CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "2 ctxd instance(s) serve stream TRANSCRIPTS")
	require.Contains(t, string(out), "first")
	require.Contains(t, string(out), "second")
	require.Contains(t, string(out), "stop them first")
	st, err := c.js.Stream(context.Background(), "TRANSCRIPTS")
	require.NoError(t, err)
	l, err := bus.LayoutOf(st.CachedInfo().Config)
	require.NoError(t, err)
	require.Equal(t, 1, l.P, "the stream is left as it was")

	// Behind the command's back.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = bus.Partition(ctx, c.js.Conn(), "TRANSCRIPTS", 4)
	require.NoError(t, err)
	for _, a := range []*app.App{ingest, reader} {
		select {
		case <-a.Failed():
		case <-ctx.Done():
			t.Fatal("an instance goes on after the stream's partitions changed")
		}
		require.ErrorIs(t, a.Err(), app.ErrLayoutChanged)
	}
	c.publishValue("s1", record.NewMap("role", "user", "content", "two"), false)
	for range 6 {
		r, serr := c.fetch("s1", nil, nil)
		require.Nil(t, r, "no context is served from the old layout")
		require.NotNil(t, serr)
	}
}
