package bus

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/checkpoint"
)

// seqsWindow is how many single direct gets ReadSubjectSeqs has in
// flight: a session of a few hundred records since its compaction is
// asked for in one or two windows, each reply about 0.5 KB to a few
// hundred (a screenshot), well within what a subscription buffers.
const seqsWindow = 256

// ReadSubjectSeqs calls fn for the messages at the given stream sequences,
// in the order given, as ReadSeqs does, and checks that each is a message
// of subject: the sequences come from a record index (a checkpoint's, or
// the store's), which is a hint. A sequence whose message is on another
// subject, or that the stream leader says holds no message (deleted), fails
// the read with an error wrapping checkpoint.ErrIndexStale, before fn is
// called for it: the caller then reads the subject instead.
//
// As ReadSeqs, a replica without a sequence is asked again, then the
// leader: a replica behind never makes a sequence look deleted; and a
// sequence whose reply did not come (a frozen replica) is asked again.
func ReadSubjectSeqs(ctx context.Context, nc *nats.Conn, stream, subject string, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	d, err := openDirectGet(nc, stream, DirectTimeout)
	if err != nil {
		return err
	}
	defer d.close()
	type got struct {
		subject string
		data    []byte
	}
	have := make(map[uint64]got, min(len(seqs), seqsWindow))
	var missing []uint64
	// Bounded in bytes too, as ReadSeqs's window is.
	budget := min(PullBytes(d.nc), directMaxBytes)
	window := seqWindow(budget, budget, seqsWindow)
	largest := 0
	for start := 0; start < len(seqs); {
		part := seqs[start:min(start+window, len(seqs))]
		start += len(part)
		clear(have)
		next := 0 // of part: the first not handed on yet
		// handOn hands on the records of part in order from next, as far
		// as they came.
		handOn := func() error {
			for ; next < len(part); next++ {
				g, ok := have[part[next]]
				if !ok {
					return nil
				}
				if g.subject != subject {
					return fmt.Errorf("stream %s: sequence %d is a message of %s, not of %s: %w", stream, part[next], g.subject, subject, checkpoint.ErrIndexStale)
				}
				delete(have, part[next])
				if err := fn(part[next], g.data); err != nil {
					return err
				}
			}
			return nil
		}
		missing = append(missing[:0], part...)
		err := d.askAll(ctx, missing, func(r directReply) error {
			have[r.seq] = got{r.subject, r.data}
			largest = max(largest, len(r.data))
			// Decoding the records that came overlaps with the
			// server sending the others.
			return handOn()
		}, func(seq uint64) bool {
			_, ok := have[seq]
			return ok || slices.Contains(part[:next], seq)
		}, func(seq uint64, m *Msg) error {
			if m == nil {
				return fmt.Errorf("stream %s: sequence %d of %s holds no message: %w", stream, seq, subject, checkpoint.ErrIndexStale)
			}
			have[seq] = got{m.Subject, m.Data}
			return nil
		})
		if err != nil {
			return err
		}
		if err := handOn(); err != nil {
			return err
		}
		if next < len(part) {
			return d.errorf("of %d: no reply", part[next])
		}
		if largest > 0 {
			window = seqWindow(budget, largest, seqsWindow)
		}
	}
	return nil
}
