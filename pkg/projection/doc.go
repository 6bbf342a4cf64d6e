// Package projection is the pure core of ctxd: it turns a session's
// records into the model context, exactly as docs/CONTEXT.md says.
//
// A record is a value decoded by package record (a map, in the data model
// of JSON). The context is the list of messages an LLM request is built
// from, together with a report of what was left out (Dropped). The rules
// run in three passes: records are classified and converted, and a valid
// compaction replaces everything gathered before it (pass 1); tool calls
// are paired with their results (pass 2); earlier browser screenshots are
// trimmed (pass 3).
//
// There are two forms of the same function:
//
//   - Build is the reference: the three passes over all of a session's
//     records at once, written to follow the rules text line by line.
//   - Session is the incremental form the service keeps per session:
//     Apply takes one record at a time, in stream order, and the messages,
//     the Dropped report and the encoded messages (JSONBody, MsgpackBody)
//     always equal what Build answers over the records applied so far.
//     Apply costs time in proportion to the record, not to the history,
//     and a reply that did not change is served from cache.
//
// A Session holds what its context can still need, not every record it
// was given: a settled message is kept as its JSON bytes (pack.go), from
// the moment Apply has met enough of them, read or not (shed.go), and
// a browser screenshot lets go of its images the moment a newer one
// trims it, since nothing can bring them back into the context
// (shed.go). Size estimates what it holds, which a service counts
// against its memory bound.
//
// Apply is idempotent by stream sequence (a redelivered record is a no-op)
// and Skip marks a sequence that held no usable record, so a Session's Seq
// is always the last stream sequence it has taken.
//
// A Session's whole state can be written down and read back:
// AppendSnapshot encodes it, about the size of its JSON reply, and
// Restore gives back a session that answers, and goes on applying
// records, exactly as the one the snapshot was taken of. A service
// stores snapshots so that the first request for a session after a
// restart reads none of the session's records up to the snapshot (only
// its last one, to prove the snapshot is of the stream, and any after
// it). Restore replays the
// snapshot's messages through the code Apply runs, and refuses, with an
// error wrapping ErrSnapshot, anything that is not a snapshot of this
// format for the same Options.
//
// # Files
//
//	build.go      Build, Record: the passes over every record at once
//	convert.go    pass 1: a record classified and converted
//	tools.go      Options, the pairing of calls and results, the browser screenshots
//	session.go    Session and Apply
//	view.go       the rendering cache: the messages and their JSON and msgpack
//	pack.go       a settled entry kept as its JSON bytes
//	shed.go       what a session lets go of: settled messages, trimmed images
//	seqs.go       MessageSeqs: the record of each message
//	dropped.go    the Dropped report
//	explain.go    Fate: what the rules made of a record
//	snapshot.go   the snapshot format (values in record's binary form), AppendSnapshot
//	restore.go    Restore: a session read back from a snapshot
//
// The package does no I/O, reads no clock and knows nothing of NATS: it is
// tested with the spec fixtures (golden_test.go), a rule-by-rule suite
// (rules_test.go), generated sessions checking Session against Build after
// every record, and that it holds no trimmed screenshot's images
// (property_test.go; a third of them browsing sessions, mostly
// screenshots), generated sessions snapshotted and restored at random
// points (snapshot_test.go), and fuzz targets.
package projection
