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

	sn, err := Snapshots()
	require.NoError(t, err)
	require.Equal(t, "KV_"+SnapshotsBucket, sn.Name)
	require.Equal(t, []string{"$KV." + SnapshotsBucket + ".>"}, sn.Subjects)
	require.Equal(t, int64(1), sn.MaxMsgsPerSubject)
	require.True(t, sn.AllowDirect)

	c, err := Ingest()
	require.NoError(t, err)
	require.Equal(t, "ctxd", c.Durable)
	require.Equal(t, jetstream.AckNonePolicy, c.AckPolicy)
	require.Equal(t, jetstream.DeliverAllPolicy, c.DeliverPolicy)
	require.Equal(t, "transcripts.>", c.FilterSubject)
}

func TestPartitionsOf(t *testing.T) {
	cfg, err := Transcripts()
	require.NoError(t, err)
	p, after, err := PartitionsOf(cfg)
	require.NoError(t, err)
	require.Equal(t, 1, p)
	require.Zero(t, after)
	cfg.SubjectTransform = PartitionTransform(16)
	cfg.Metadata = map[string]string{PartitionedAfter: "42"}
	p, after, err = PartitionsOf(cfg)
	require.NoError(t, err)
	require.Equal(t, 16, p)
	require.Equal(t, uint64(42), after)
	cfg.SubjectTransform.Destination = "transcripts.{{wildcard(1)}}.x"
	_, _, err = PartitionsOf(cfg)
	require.Error(t, err)
	cfg.SubjectTransform = PartitionTransform(16)
	cfg.Metadata[PartitionedAfter] = "x"
	_, _, err = PartitionsOf(cfg)
	require.Error(t, err)
	c, err := PartitionIngest(3)
	require.NoError(t, err)
	require.Equal(t, "ctxd-p3", c.Durable)
	require.Equal(t, "transcripts.3.*", c.FilterSubject)
	require.Equal(t, []string{IngestGroup}, c.PriorityGroups)
}
