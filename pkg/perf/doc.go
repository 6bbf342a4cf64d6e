// Package perf measures ctxd against what it is built on, in one run: each
// figure beside a baseline measured in the same run on the same machine,
// and the ratio of the two.
//
//   - ingest: records/s from publish to applied in the projections, against
//     a raw JetStream async publish of the same records to an identical
//     stream, and against a durable consumer that does nothing;
//   - fetch: latency percentiles of ctxd.context.<session> for sessions of
//     several lengths, against a bare NATS request-reply returning the same
//     bytes, requests interleaved;
//   - clients: requests/s of concurrent clients, against the same clients
//     of the bare responder;
//   - turn: a turn with ctxd (publish the turn's records, then fetch with
//     min_seq) against the same turn with a responder that rebuilds the
//     context per request, as a store-and-rebuild design does (read the
//     session's records from the stream, projection.Build, encode, reply),
//     both timed as the client's round trips; and a fetch of a session with
//     no new records against the same rebuild;
//   - rebuild: records/s of ctxd rebuild gathering and writing the
//     sessions' checkpoints, and of rebuilding whole projections as its
//     --check does, against a raw ordered consumer over the same stream;
//   - cold: the latency of a fetch that loads its session from the stream,
//     against reading the session's records with direct gets;
//   - memory: resident bytes per live session, against the bytes of the
//     contexts those sessions answer.
//
// Soak is apart from Run: it starts ctxd serve as a process of its own
// (its RSS is then ctxd's and its embedded server's) and drives it with
// agents in a closed loop over browsing sessions for a while, checking
// every reply against the agents' own projections, and reports turns,
// latency beside a bare turn, and memory per window (ctxd soak).
//
// Run starts an embedded NATS server in a directory (or uses the server of
// Config.NATSURL), measures the figures Config selects, and returns a
// Report whose WriteTable prints one row per figure. Everything runs in
// one process: ctxd (package app), the server and the clients share its
// CPUs and its heap. `ctxd bench` is the command line over it.
//
// The run checks what it measures: every fetch returns the whole reply,
// every turn's reply is at the turn's last record, the rebuilt-per-turn
// reply equals ctxd's byte for byte, replays read every record, and a
// report warns when ctxd's watermark passed records it neither applied
// nor rejected.
//
// The baselines use the JetStream API raw (async publishes, ordered and
// durable consumers, stream management), because they measure what ctxd
// is built on: besides bus and the definitions in streams/, perf is the
// one package that imports it, for those baselines and their streams.
package perf
