package streams

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// Partitions of the TRANSCRIPTS stream. With P > 1 the stream stores a
// record published to transcripts.<session> as
// transcripts.<k>.<session>, k = FNV-32a(session) mod P (the server's
// {{partition(P,1)}}), and each partition has its own ingest consumer,
// ctxd-p<k>, filtered on transcripts.<k>.*. P is the stream's: it is
// written in its subject transform, and fixed for the stream's life.
const (
	// TranscriptsSource is the transform's source: publishes to
	// transcripts.<session>.
	TranscriptsSource = "transcripts.*"
	// PartitionedAfter is the stream metadata key that holds the last
	// stream sequence stored before the transform was added to a stream
	// that had records: a session's records up to it may be on
	// transcripts.<session>, and later ones are on
	// transcripts.<k>.<session>.
	PartitionedAfter = "ctxd_partitioned_after"
	// MaxPartitions bounds P: one durable consumer per partition.
	MaxPartitions = 1024
	// RecommendedPartitions is what to choose without a reason to choose
	// otherwise: more than the instances foreseen, few consumers.
	RecommendedPartitions = 16
)

// PartitionTransform returns the stream subject transform of p
// partitions.
func PartitionTransform(p int) *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      TranscriptsSource,
		Destination: fmt.Sprintf("transcripts.{{partition(%d,1)}}.{{wildcard(1)}}", p),
	}
}

var partitionDest = regexp.MustCompile(`^transcripts\.\{\{\s*[pP]artition\s*\(\s*(\d+)\s*,\s*1\s*\)\s*\}\}\.\{\{\s*[wW]ildcard\s*\(\s*1\s*\)\s*\}\}$`)

// PartitionsOf returns the number of partitions of a TRANSCRIPTS stream
// configuration and the sequence its transform was added after (0: from
// the start): 1 and 0 without a transform. A transform ctxd does not know
// is an error: ctxd would not find the records.
func PartitionsOf(cfg jetstream.StreamConfig) (p int, after uint64, err error) {
	tr := cfg.SubjectTransform
	if tr == nil || tr.Source == "" && tr.Destination == "" {
		return 1, 0, nil
	}
	m := partitionDest.FindStringSubmatch(tr.Destination)
	if tr.Source != TranscriptsSource || m == nil {
		return 0, 0, fmt.Errorf("streams: stream %s transforms %q to %q; ctxd knows only %q to %q", cfg.Name, tr.Source, tr.Destination, TranscriptsSource, PartitionTransform(16).Destination)
	}
	p, err = strconv.Atoi(m[1])
	if err != nil || p < 1 || p > MaxPartitions {
		return 0, 0, fmt.Errorf("streams: stream %s: %s partitions; 1 to %d", cfg.Name, m[1], MaxPartitions)
	}
	if v, ok := cfg.Metadata[PartitionedAfter]; ok {
		if after, err = strconv.ParseUint(v, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("streams: stream %s: metadata %s=%q is not a sequence", cfg.Name, PartitionedAfter, v)
		}
	}
	return p, after, nil
}

// PartitionName returns the name of partition k's ingest consumer.
func PartitionName(k int) string { return "ctxd-p" + strconv.Itoa(k) }

// PartitionIngest returns the ingest consumer definition of partition k:
// the ingest's, named ctxd-p<k> and filtered on transcripts.<k>.*.
func PartitionIngest(k int) (jetstream.ConsumerConfig, error) {
	cfg, err := Ingest()
	if err != nil {
		return cfg, err
	}
	cfg.Name, cfg.Durable = PartitionName(k), PartitionName(k)
	cfg.FilterSubject = "transcripts." + strconv.Itoa(k) + ".*"
	cfg.Description = fmt.Sprintf("ctxd ingest of partition %d: applies its records, in stream order; one instance at a time, the pinned one", k)
	return cfg, nil
}
