package store

import "github.com/ctxd/ctxd/pkg/checkpoint"

// Checkpoint says where a session's projection can be rebuilt from
// (package checkpoint, which bus shares).
type Checkpoint = checkpoint.Checkpoint

// MaxCheckpointSeqs bounds the record sequences a checkpoint carries
// (checkpoint.MaxSeqs).
const MaxCheckpointSeqs = checkpoint.MaxSeqs

// ErrBadCheckpoint is wrapped by the error of a stored checkpoint that
// does not decode (checkpoint.ErrBadCheckpoint).
var ErrBadCheckpoint = checkpoint.ErrBadCheckpoint

// The record index's codec, as the snapshots store it too.
var (
	encodeSeqs = checkpoint.EncodeSeqs
	decodeSeqs = checkpoint.DecodeSeqs
	checkSeqs  = checkpoint.CheckSeqs
)
