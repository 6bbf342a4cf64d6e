package bus

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"
)

// readSeqs gets each sequence with a single direct get, a window of them
// in flight at a time. Replies may come in any order (the replicas of a
// stream answer direct gets too), so they are matched by sequence: every
// request has one reply, a message or a 404. The sequences of a window
// that got a 404 are asked again, and at last of the leader; those whose
// reply did not come are asked again (see askSeqs).
//
// The window is bounded in bytes too, as a batch is (PullBytes, at most
// directMaxBytes): the server closes a connection that falls more than
// its max_pending behind (a slow consumer), and 128 records of 6 MiB
// would be 768 MiB at once. Until a reply says how large the records
// are, the window holds one message as large as the server takes; then
// as many of the largest record read so far as the bytes hold.
func (d *directGet) readSeqs(ctx context.Context, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	got := make(map[uint64][]byte, min(len(seqs), directWindow))
	var missing []uint64
	budget := min(PullBytes(d.nc), directMaxBytes)
	window := seqWindow(budget, budget, directWindow)
	largest := 0
	for start := 0; start < len(seqs); {
		part := seqs[start:min(start+window, len(seqs))]
		start += len(part)
		clear(got)
		missing = append(missing[:0], part...)
		err := d.askAll(ctx, missing, func(r directReply) error {
			got[r.seq] = r.data
			largest = max(largest, len(r.data))
			return nil
		}, func(seq uint64) bool {
			_, ok := got[seq]
			return ok
		}, func(seq uint64, m *Msg) error {
			if m != nil {
				got[seq] = m.Data
			} // else deleted
			return nil
		})
		if err != nil {
			return err
		}
		for _, seq := range part {
			if data, ok := got[seq]; ok {
				if err := fn(seq, data); err != nil {
					return err
				}
			}
		}
		if largest > 0 {
			window = seqWindow(budget, largest, directWindow)
		}
	}
	return nil
}

// askAll asks for the sequences of missing until each is answered:
// again at once while replies keep coming (a reply lost to a frozen
// replica; maxLostRounds rounds in a row without one fail the read),
// again after a pause while replicas answer 404 (readRetries times),
// then of the leader. Each reply goes to reply; answered says whether a
// sequence needs no more asking; leader gets the leader's answer for
// each sequence still missing, nil for one it holds no message at.
// missing is reordered and overwritten.
func (d *directGet) askAll(ctx context.Context, missing []uint64, reply func(directReply) error, answered func(seq uint64) bool, leader func(seq uint64, m *Msg) error) error {
	for try, lost := 0, 0; len(missing) > 0; {
		more, err := d.askSeqs(ctx, missing, reply)
		if err != nil {
			return err
		}
		asked := len(missing)
		missing = slices.DeleteFunc(missing, answered)
		if len(missing) == 0 {
			return nil
		}
		if more {
			if lost = lostRounds(lost, len(missing) < asked); lost > maxLostRounds {
				return d.errorf("of %d sequences from %d: %w in %d rounds", len(missing), missing[0], ErrNoReply, lost)
			}
			continue
		}
		d.stale(len(missing))
		if try >= readRetries {
			for _, seq := range missing {
				m, err := d.leaderGet(ctx, getRequest{Seq: seq})
				if err != nil {
					return err
				}
				if err := leader(seq, m); err != nil {
					return err
				}
			}
			return nil
		}
		if err := d.retry(ctx, try); err != nil {
			return err
		}
		try++
	}
	return nil
}

// seqWindow is how many single direct gets of messages of size bytes are
// in flight at once: budget bytes of them, at least one, at most most.
func seqWindow(budget, size, most int) int {
	return min(max(1, budget/max(size, 1)), most)
}

// lostAfter is how long a read by sequence waits for the next reply once
// one has come: the server answers a pipeline of single direct gets back
// to back, so a longer silence means the rest went to a replica that
// will not answer. A node that freezes (a stopped process, a hung
// machine) stays in the queue group that answers the stream's direct
// gets until the other servers drop its route, up to their route ping
// interval or longer, and every request sent meanwhile has a chance to
// land on it. Those are asked again, twice each, so that one round most
// likely gets them: with one replica of three frozen, a reply is lost
// one time in three, both of a pair one time in nine. A reply that comes
// late, after its round, is used all the same.
const lostAfter = 100 * time.Millisecond

// maxLostRounds bounds the rounds in a row of a read by sequence that
// asked again for replies that did not come and got none of them: at
// least maxLostRounds x lostAfter of silence. A round that got some
// (from a server slow to answer, on a loaded machine) starts the count
// again.
const maxLostRounds = 16

// lostRounds counts a round that ended with replies missing: lost is the
// count so far, progress whether the round got any it asked for.
func lostRounds(lost int, progress bool) int {
	if progress {
		return 0
	}
	return lost + 1
}

// askSeqs sends a single direct get for each sequence (two once the read
// has had a reply lost), then hands fn the messages of the replies (404s
// and 503s are left out), until every reply has come or more is set: a
// reply did not come within lostAfter of the one before (the first
// within the timeout, or within lostAfter once the read has had a reply
// lost).
func (d *directGet) askSeqs(ctx context.Context, seqs []uint64, fn func(directReply) error) (more bool, err error) {
	copies, wait := 1, d.timeout
	if d.lost {
		copies, wait = 2, min(lostAfter, d.timeout)
	}
	var req []byte
	for _, seq := range seqs {
		req = strconv.AppendUint(append(req[:0], `{"seq":`...), seq, 10)
		req = append(req, '}')
		for range copies {
			if err := d.nc.PublishRequest(d.api, d.sub.Subject, req); err != nil {
				return false, d.errorf("of %d: %w", seq, err)
			}
		}
	}
	for range copies * len(seqs) {
		r, err := d.replyWithin(ctx, wait)
		if errors.Is(err, ErrNoReply) {
			if !d.lost {
				d.lost = true
				readStats.lost.Add(1)
			}
			return true, nil
		}
		if err != nil {
			return false, d.errorf("of %d sequences from %d: %w", len(seqs), seqs[0], err)
		}
		wait = min(lostAfter, d.timeout)
		switch r.kind {
		case notFound, unavailable: // not on the replica that answered, or no replica
		case message:
			if err := fn(r); err != nil {
				return false, err
			}
		default:
			return false, d.errorf("of %d sequences from %d: an end of batch answers no batch", len(seqs), seqs[0])
		}
	}
	return false, nil
}
