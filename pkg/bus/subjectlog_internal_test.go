package bus

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A stream info of a replicated stream answered while its group has no
// leader is a replica's state, which may be behind: a subject it counts
// no message of may hold many. It is an error, never a count.
func TestFromLeader(t *testing.T) {
	require.NoError(t, fromLeader(&jetstream.StreamInfo{}))
	require.NoError(t, fromLeader(&jetstream.StreamInfo{Cluster: &jetstream.ClusterInfo{Leader: "n1"}}))
	require.NoError(t, fromLeader(&jetstream.StreamInfo{Cluster: &jetstream.ClusterInfo{RaftGroup: "S-R3F-x", Leader: "n2"}}))
	require.ErrorIs(t, fromLeader(&jetstream.StreamInfo{Cluster: &jetstream.ClusterInfo{RaftGroup: "S-R3F-x"}}), ErrNoStreamLeader)
}
