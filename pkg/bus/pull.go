package bus

import "github.com/nats-io/nats.go"

// The server cuts a client off as a slow consumer once more than its
// max_pending bytes (64 MiB by default; a setting of the server, not told
// to clients) wait to be written to it. A pull of the ingest, or a
// batched direct get, asks the server to send up to its max_bytes at
// once: asked for more than max_pending, a server whose client does not
// read that fast cuts ctxd off, and again at the next pull after the
// reconnect, so that nothing gets through.
//
// What a client learns of the server's limits is max_payload (INFO), and
// the server refuses to start with a max_pending below its max_payload.
// So a pull of max_payload bytes, and a little room for the headers and
// subjects a delivered message carries, is about the most that fits
// every server's max_pending, and still holds the largest message the
// server takes (a pull smaller than one stored message gets a 409 and
// never that message). Other reads on the connection (a session's load)
// are in flight beside it: a server whose max_pending is barely its
// max_payload can still cut ctxd off under load; its default is 64 times
// that.
const (
	// maxPullBytes bounds a pull however large the server's max_payload:
	// more brings nothing to throughput, and costs memory.
	maxPullBytes = 16 << 20
	// pullRoom is the room, beyond max_payload, for the subject, reply
	// subject and headers of a delivered message.
	pullRoom = 64 << 10
	// defaultPullBytes is the pull size when the server's max_payload is
	// unknown: nats-server's default max_payload, 1 MiB, and room.
	defaultPullBytes = 1<<20 + pullRoom
)

// PullBytes returns the max_bytes of one pull, or one batched direct get,
// on nc's server: its max_payload and room for a message's headers, at
// most 16 MiB. See above for why that fits the server's max_pending.
func PullBytes(nc *nats.Conn) int {
	if nc == nil {
		return defaultPullBytes
	}
	return pullBytesFor(nc.MaxPayload())
}

func pullBytesFor(maxPayload int64) int {
	if maxPayload <= 0 {
		return defaultPullBytes
	}
	return int(min(maxPayload+pullRoom, maxPullBytes))
}
