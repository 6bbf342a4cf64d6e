// Package protocol is the wire of ctxd's context endpoint
// (docs/PROTOCOL.md), defined once: the request (its fields, limits and
// defaults, parsed from a JSON object or a msgpack map and appended as
// either), the headers of a reply and of its chunks, the reply codes, and
// delta replies: a reply's digest, and a delta put back together with the
// reply a client holds (delta.go: Hold, Held.Apply, ApplyDelta).
// The service (pkg/server) parses requests with it; the Go client
// (pkg/client), rebuild --check (pkg/rebuild), the benchmarks (pkg/perf)
// and the CLI write them with it. It knows nothing of NATS connections,
// projections or formats beyond their names on the wire.
//
//	request.go  the request: fields, limits, defaults, both encodings
//	headers.go  the headers of a reply and of its chunks
//	reply.go    ReadReply: a context reply's members and message array
//	delta.go    digests, and a delta reply put back together (Hold, ApplyDelta)
//	value.go    skipping and locating encoded values (Locate, SkipValue)
package protocol
