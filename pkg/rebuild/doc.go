// Package rebuild replays the TRANSCRIPTS stream into what `ctxd rebuild`
// produces: per-session checkpoints (Checkpoints), or whole projections
// when they are to be compared with the running service (Projections).
//
// A Rebuilder runs the command's passes: Open notes where the stream
// ends, Read reads the sessions to rebuild (the whole stream with an
// ordered consumer, or single sessions with direct gets), then either
// WriteCheckpoints stores their checkpoints or Check compares their
// contexts with the service's, listing every session that differs or
// could not be compared. It reaches JetStream only through package bus.
// The bench measures the same code, so its figures are those of the
// command.
package rebuild
