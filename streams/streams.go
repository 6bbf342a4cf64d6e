// Package streams holds the JetStream definitions ctxd runs on, as JSON
// in the NATS API format: the same files `nats stream add --config` and
// `nats consumer add --config` accept. ctxd embeds them and creates what
// is missing at start.
package streams

import (
	"embed"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

//go:embed *.json
var files embed.FS

// Files of the definitions.
const (
	TranscriptsFile = "transcripts.stream.json"
	IngestFile      = "ctxd.consumer.json"
	CheckpointsFile = "checkpoints.kv.json"
	SnapshotsFile   = "snapshots.kv.json"
)

// CheckpointsBucket is the key-value bucket of session checkpoints; its
// stream is KV_ and the bucket name.
const CheckpointsBucket = "CTXD_CHECKPOINTS"

// SnapshotsBucket is the key-value bucket of session snapshots; its
// stream is KV_ and the bucket name.
const SnapshotsBucket = "CTXD_SNAPSHOTS"

// Transcripts returns the TRANSCRIPTS stream definition.
func Transcripts() (jetstream.StreamConfig, error) {
	var cfg jetstream.StreamConfig
	return cfg, load(TranscriptsFile, &cfg)
}

// IngestName and IngestGroup are the ingest consumer's name and its
// priority group, as the definition has them.
const (
	IngestName  = "ctxd"
	IngestGroup = "ctxd"
)

// Ingest returns the durable consumer definition the projections are fed by.
func Ingest() (jetstream.ConsumerConfig, error) {
	var cfg jetstream.ConsumerConfig
	return cfg, load(IngestFile, &cfg)
}

// Checkpoints returns the stream behind the checkpoint bucket, in the form
// a JetStream key-value bucket takes.
func Checkpoints() (jetstream.StreamConfig, error) {
	var cfg jetstream.StreamConfig
	return cfg, load(CheckpointsFile, &cfg)
}

// Snapshots returns the stream behind the snapshot bucket, in the form a
// JetStream key-value bucket takes.
func Snapshots() (jetstream.StreamConfig, error) {
	var cfg jetstream.StreamConfig
	return cfg, load(SnapshotsFile, &cfg)
}

func load(name string, v any) error {
	data, err := files.ReadFile(name)
	if err != nil {
		return fmt.Errorf("streams: %w", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("streams: %s: %w", name, err)
	}
	return nil
}
