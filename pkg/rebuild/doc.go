// Package rebuild replays the TRANSCRIPTS stream into what `ctxd rebuild`
// produces: per-session checkpoints (Checkpoints), or whole projections
// when they are to be compared with the running service (Projections).
// The bench measures the same code, so its figures are those of the
// command.
package rebuild
