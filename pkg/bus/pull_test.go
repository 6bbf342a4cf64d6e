package bus

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPullBytesFor(t *testing.T) {
	require.Equal(t, 1<<20+pullRoom, pullBytesFor(1<<20), "nats-server's default max_payload")
	require.Equal(t, 8<<20+pullRoom, pullBytesFor(8<<20))
	require.Equal(t, maxPullBytes, pullBytesFor(64<<20), "at most 16 MiB")
	require.Equal(t, defaultPullBytes, pullBytesFor(0), "not connected")
	require.Equal(t, defaultPullBytes, PullBytes(nil))
}
