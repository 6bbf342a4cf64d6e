package bus

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
)

// Direct gets ($JS.API.DIRECT.GET.<stream>, on a stream with allow_direct)
// read stored messages without a consumer. A batched one,
// {"seq":N,"batch":B} (with "next_by_subj" to keep to one subject), is
// answered with up to B messages in sequence order and then an end of
// batch, a 204 EOB status whose Nats-Num-Pending header counts the
// messages at or after the sequence where the batch stopped; or with a
// single 404 when there is no message at or after N at all. The server
// also stops a batch once it has sent max_bytes (the request's, else its
// own max_pending, 64 MiB by default), so a batch with fewer messages than
// asked for says nothing about the end of the stream: only
// Nats-Num-Pending, a 404, or a message past the range does.
//
// On a replicated stream every replica answers direct gets, and a
// follower may not yet have stored what the leader has acknowledged: its
// 404, or its end of batch with nothing pending, only says where that
// replica is. So every read here proves from the replies how far it
// reached (see validate.go), and asks again, or asks the stream leader,
// when it ended before a record it knows exists.
const (
	// directBatch is how many messages one batched direct get asks for.
	directBatch = 256
	// directMaxBytes bounds the max_bytes of a batched direct get, which
	// is PullBytes, so that it fits the server's max_pending: about this
	// much, plus one message, is in flight per batch. The read's inbox
	// holds replyRoom messages, room for every reply a read has in flight,
	// so none is dropped as a slow consumer's (a reply dropped all the
	// same only makes the read ask again: it proves where it ended).
	directMaxBytes = 16 << 20
	// directWindow is how many single direct gets ReadSeqs has in flight.
	directWindow = 128
)

// DirectTimeout is how long a direct get waits for each reply. A reply
// that has not come by then is taken as lost (its replica's server may
// have stopped with the request in flight): the read asks again, on a
// new inbox, from where it got to, and another replica (or the stream
// leader) answers. After noReplyTries lost replies in a row the read
// fails with ErrNoReply, rather than wait on: a lost reply must not hang
// a session's load or the ingest. The caller's context can end a read
// sooner.
const DirectTimeout = time.Second

// noReplyTries bounds the attempts of a read whose replies are lost.
const noReplyTries = 4

// attemptTimeout is DirectTimeout; tests shorten it.
var attemptTimeout = DirectTimeout

// ErrNoReply is wrapped by the error of a read whose replies did not
// come within DirectTimeout, noReplyTries times in a row.
var ErrNoReply = errors.New("no reply")

// attempt runs read on a new directGet until it ends with something
// other than a lost reply, or noReplyTries times. read must go on from
// where the previous attempt got to.
func attempt(ctx context.Context, nc *nats.Conn, stream string, read func(d *directGet) error) error {
	for try := 1; ; try++ {
		d, err := openDirectGet(nc, stream, attemptTimeout)
		if err != nil {
			return err
		}
		err = read(d)
		d.close() // late replies to the lost request go with the inbox
		if err == nil || !errors.Is(err, ErrNoReply) || try >= noReplyTries || ctx.Err() != nil {
			return err
		}
		readStats.lost.Add(1)
	}
}

// ReadSubject calls fn for every message stored on subject with a stream
// sequence from from to to (inclusive), in order, with batched direct gets:
// a few round trips however many sessions share the stream, and no
// consumer.
//
// It returns only once it has proven it reached the subject's last
// message up to to: a reply held a message of the subject at or past to,
// or else a replica whose last stream sequence is at least to (its answer
// to a multi_last direct get, one more round trip), or the stream leader,
// names the subject's last message, and the read got to it. to should be
// a sequence the stream is known to hold (a PubAck's, the ingest's
// watermark); math.MaxUint64 reads to the end of the subject as the stream
// leader sees it.
func ReadSubject(ctx context.Context, nc *nats.Conn, stream, subject string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	next := from
	return attempt(ctx, nc, stream, func(d *directGet) error {
		return d.readSubject(ctx, subject, next, to, func(r directReply) error {
			if err := fn(r.seq, r.data); err != nil {
				return err
			}
			next = r.seq + 1
			return nil
		})
	})
}

// ReadRange calls fn for every message of the stream with a sequence from
// from to to (inclusive), whatever its subject, in order, with batched
// direct gets. Deleted sequences are skipped.
//
// It returns only once a reply held the message at to or a later one, or
// the stream leader said there is none from where the replicas stopped:
// to should be a sequence the stream is known to hold or to have held
// (the ingest's gap filler knows the message after it).
func ReadRange(ctx context.Context, nc *nats.Conn, stream string, from, to uint64, fn func(m Msg) error) error {
	next := from
	return attempt(ctx, nc, stream, func(d *directGet) error {
		return d.readRange(ctx, next, to, func(r directReply) error {
			if err := fn(Msg{Subject: r.subject, Seq: r.seq, Data: r.data}); err != nil {
				return err
			}
			next = r.seq + 1
			return nil
		})
	})
}

// ReadSeqs calls fn for the messages at the given stream sequences, in
// the order given, with single direct gets pipelined a window at a time:
// each is a lookup by sequence, however the stream's subjects interleave.
//
// The sequences are ones the stream is known to have stored: a replica
// without one is asked again, then the stream leader, and a sequence is
// skipped only when the leader says it holds no message there (deleted).
func ReadSeqs(ctx context.Context, nc *nats.Conn, stream string, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	return attempt(ctx, nc, stream, func(d *directGet) error {
		return d.readSeqs(ctx, seqs, func(seq uint64, data []byte) error {
			if err := fn(seq, data); err != nil {
				return err
			}
			// Handed on in the order given: the next attempt starts after it.
			seqs = seqs[slices.Index(seqs, seq)+1:]
			return nil
		})
	})
}

// LastOf returns the last message stored on subject (nil when there is
// none) and upTo, a stream sequence up to which that is proven: no
// message of the subject with a sequence up to upTo comes after last.
//
// It asks any replica, with a multi_last direct get, and upTo is then the
// answering replica's last stream sequence (Nats-UpTo-Sequence), which
// may be behind the stream leader's: a caller that needs the subject's
// last message up to a sequence S it knows is stored asks again when upTo
// < S. A replica that holds nothing of the subject answers 404 without a
// position; then, as when no replica answers, the stream leader is asked,
// for its last sequence and then the subject's last message.
func LastOf(ctx context.Context, nc *nats.Conn, stream, subject string) (last *Msg, upTo uint64, err error) {
	err = attempt(ctx, nc, stream, func(d *directGet) error {
		last, upTo, err = d.multiLast(ctx, subject)
		if err != nil || last != nil {
			return err
		}
		if upTo, err = d.leaderLastSeq(ctx); err != nil {
			return err
		}
		if last, err = d.leaderGet(ctx, getRequest{LastFor: subject}); err != nil {
			return err
		}
		if last != nil {
			upTo = max(upTo, last.Seq) // stored after the leader said where it was
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return last, upTo, nil
}

// CountSubject returns how many messages stored on subject have a
// stream sequence at or after from, as the replica that answers holds
// them: a batched direct get of one message, the subject's first from
// there, whose end of batch counts the messages of the subject after it
// (Nats-Num-Pending), both read at one moment of the replica. A replica
// behind counts fewer messages than the stream leader, never more:
// messages are only added past a stream's end. 0 when the replica holds
// none, or no replica answers.
func CountSubject(ctx context.Context, nc *nats.Conn, stream, subject string, from uint64) (n uint64, err error) {
	err = attempt(ctx, nc, stream, func(d *directGet) error {
		n, err = d.count(ctx, subject, from)
		return err
	})
	return n, err
}
