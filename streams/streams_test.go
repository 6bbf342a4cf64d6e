package streams

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

func TestDefinitions(t *testing.T) {
	s, err := Transcripts()
	require.NoError(t, err)
	require.Equal(t, "TRANSCRIPTS", s.Name)
	require.Equal(t, []string{"transcripts.>"}, s.Subjects)
	require.Equal(t, jetstream.FileStorage, s.Storage)
	require.Equal(t, jetstream.LimitsPolicy, s.Retention)
	require.GreaterOrEqual(t, s.Duplicates, 2*time.Minute)
	require.True(t, s.AllowDirect)
	require.Equal(t, int32(8<<20), s.MaxMsgSize)

	c, err := Ingest()
	require.NoError(t, err)
	require.Equal(t, "ctxd", c.Durable)
	require.Equal(t, jetstream.AckNonePolicy, c.AckPolicy)
	require.Equal(t, jetstream.DeliverAllPolicy, c.DeliverPolicy)
	require.Equal(t, "transcripts.>", c.FilterSubject)
}
