package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The inspector reads on a connection of its own, so that the large
// records a view reads never queue ahead of the ingest's deliveries and
// the service's replies on the app's connection; Close closes it.
func TestInspectSource_OwnConnection(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir, cfg.Port = t.TempDir(), -1
	a := New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Open(ctx))
	defer a.Close()
	src, ok := a.InspectSource().(*inspectSource)
	require.True(t, ok)
	_, err := src.Sessions(ctx)
	require.NoError(t, err)
	nc, err := src.conn()
	require.NoError(t, err)
	require.NotSame(t, a.nc, nc)
	require.True(t, nc.IsConnected())
	require.Contains(t, nc.Opts.Name, "inspector")
	again, err := a.InspectSource().(*inspectSource).conn()
	require.NoError(t, err)
	require.Same(t, nc, again, "one connection for every view")
	require.NoError(t, a.Close())
	require.True(t, nc.IsClosed())
}
