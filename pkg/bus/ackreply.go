package bus

import "strings"

// The reply subject of a message a consumer delivers names its stream
// sequence, among other things:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>                        (9 tokens)
//	$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>...] (11 or more)
//
// The ingest needs only the stream sequence of each message. jetstream's
// Metadata parses every field and allocates the result; streamSeq reads
// that one token in place, and the ingest falls back to Metadata for a
// subject it does not read.
const (
	ackPrefix     = "$JS.ACK."
	ackV1Tokens   = 9  // tokens of the first form
	ackV2Tokens   = 11 // the fewest tokens of the second form
	ackV1SeqToken = 5  // the stream sequence's position, from 0, in the first form
	ackV2SeqToken = 7  // and in the second
)

// streamSeq returns the stream sequence named by a delivered message's
// reply subject; ok is false when the subject is not one of the two
// forms above, or the sequence is not a decimal number from 1 to 2^64-1.
func streamSeq(reply string) (seq uint64, ok bool) { return ackSeq(reply, 0) }

// consumerSeq returns the consumer's delivery sequence named by a
// delivered message's reply subject, the token after the stream
// sequence, as streamSeq does.
func consumerSeq(reply string) (seq uint64, ok bool) { return ackSeq(reply, 1) }

// ackSeq reads the sequence off tokens after the stream sequence's.
func ackSeq(reply string, off int) (seq uint64, ok bool) {
	if !strings.HasPrefix(reply, ackPrefix) {
		return 0, false
	}
	var pos int
	switch n := strings.Count(reply, ".") + 1; {
	case n == ackV1Tokens:
		pos = ackV1SeqToken
	case n >= ackV2Tokens:
		pos = ackV2SeqToken
	default:
		return 0, false
	}
	pos += off
	// Skip to the token at pos: "$JS" and "ACK" are the first two.
	rest := reply[len(ackPrefix):]
	for range pos - 2 {
		i := strings.IndexByte(rest, '.')
		rest = rest[i+1:] // there are enough dots: counted above
	}
	if i := strings.IndexByte(rest, '.'); i >= 0 {
		rest = rest[:i]
	}
	if rest == "" || len(rest) > 20 {
		return 0, false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if seq > (1<<64-1-d)/10 {
			return 0, false // past 2^64-1
		}
		seq = seq*10 + d
	}
	return seq, seq > 0
}
