package bus

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/store"
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
// the read with an error wrapping store.ErrIndexStale, before fn is
// called for it: the caller then reads the subject instead.
//
// As ReadSeqs, a replica without a sequence is asked again, then the
// leader: a replica behind never makes a sequence look deleted.
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
	var req []byte
	for start := 0; start < len(seqs); start += seqsWindow {
		part := seqs[start:min(start+seqsWindow, len(seqs))]
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
					return fmt.Errorf("stream %s: sequence %d is a message of %s, not of %s: %w", stream, part[next], g.subject, subject, store.ErrIndexStale)
				}
				delete(have, part[next])
				if err := fn(part[next], g.data); err != nil {
					return err
				}
			}
			return nil
		}
		missing = append(missing[:0], part...)
		for try := 0; len(missing) > 0; try++ {
			for _, seq := range missing {
				req = strconv.AppendUint(append(req[:0], `{"seq":`...), seq, 10)
				req = append(req, '}')
				if err := d.nc.PublishRequest(d.api, d.sub.Subject, req); err != nil {
					return d.errorf("of %d: %w", seq, err)
				}
			}
			var absent []uint64
			for range missing {
				r, err := d.reply(ctx)
				if err != nil {
					return d.errorf("of %d sequences from %d: %w", len(missing), missing[0], err)
				}
				switch r.kind {
				case notFound, unavailable:
				case message:
					have[r.seq] = got{r.subject, r.data}
					// Decoding the records that came overlaps with the
					// server sending the others.
					if err := handOn(); err != nil {
						return err
					}
				default:
					return d.errorf("of %d sequences from %d: an end of batch answers no batch", len(missing), missing[0])
				}
			}
			for _, seq := range missing {
				if _, ok := have[seq]; !ok && !slices.Contains(part[:next], seq) {
					absent = append(absent, seq)
				}
			}
			missing = append(missing[:0], absent...)
			if len(missing) == 0 {
				break
			}
			d.stale(len(missing))
			if try >= readRetries {
				for _, seq := range missing {
					m, err := d.leaderGet(ctx, getRequest{Seq: seq})
					if err != nil {
						return err
					}
					if m == nil {
						return fmt.Errorf("stream %s: sequence %d of %s holds no message: %w", stream, seq, subject, store.ErrIndexStale)
					}
					have[seq] = got{m.Subject, m.Data}
				}
				break
			}
			if err := d.retry(ctx, try); err != nil {
				return err
			}
		}
		if err := handOn(); err != nil {
			return err
		}
		if next < len(part) {
			return d.errorf("of %d: no reply", part[next])
		}
	}
	return nil
}
