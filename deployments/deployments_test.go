// Package deployments holds ctxd's deployment files; its test checks that
// the NATS configurations parse.
package deployments

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

func TestNATSConfigsParse(t *testing.T) {
	files, err := filepath.Glob("nats/*.conf")
	require.NoError(t, err)
	require.Len(t, files, 4)
	for _, f := range files {
		opts, err := server.ProcessConfigFile(f)
		require.NoError(t, err, f)
		require.True(t, opts.JetStream, f)
		require.True(t, opts.SyncAlways, f)
		require.Equal(t, int32(8<<20), opts.MaxPayload, f)
	}
}
