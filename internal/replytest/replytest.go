// Package replytest reads context replies in tests: it checks a whole
// reply's digest and returns the reply without it, the reply of protocol
// 3.4, which tests compare with what a rendering from scratch gives.
package replytest

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/protocol"
)

// Plain checks that the whole reply body ends with a digest that is the
// one its messages have (protocol.ComputeDigest), and returns the reply
// without that member, in a buffer of its own.
func Plain(body []byte) ([]byte, error) {
	r, err := protocol.ReadReply(body)
	if err != nil {
		return nil, err
	}
	if r.HasDelta {
		return nil, fmt.Errorf("a delta reply, not a whole one")
	}
	if r.Digest == "" {
		return nil, fmt.Errorf("the reply has no digest")
	}
	last := r.Members[len(r.Members)-1]
	if last.Key != "digest" {
		return nil, fmt.Errorf("the reply ends with %q, not with its digest", last.Key)
	}
	want, err := protocol.ComputeDigest(body)
	if err != nil {
		return nil, err
	}
	if r.Digest != want {
		return nil, fmt.Errorf("digest %s, but its messages' is %s", r.Digest, want)
	}
	if r.Msgpack {
		if body[0]&0xf0 != 0x80 || body[0]&0x0f == 0 {
			return nil, fmt.Errorf("a reply that is not a small map: %#x", body[0])
		}
		out := append([]byte{body[0] - 1}, body[1:last.KeyStart]...)
		return append(out, body[last.End:]...), nil
	}
	// JSON: the comma before the key goes too.
	i := last.KeyStart - 1
	for i > 0 && body[i] != ',' {
		i--
	}
	out := append([]byte(nil), body[:i]...)
	return append(out, body[last.End:]...), nil
}
