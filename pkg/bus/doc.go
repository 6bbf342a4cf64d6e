// Package bus is the one package that talks JetStream: it creates and
// checks the TRANSCRIPTS stream and the ingest consumer from the
// definitions in streams/, feeds stored records to a handler in stream
// order, replays ranges of the stream, and publishes records.
//
// Data flows one way: publisher -> stream -> consumer -> handler. The
// handler (the projections) knows nothing of JetStream, and bus knows
// nothing of projections: they meet in package app.
package bus
