package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
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

// count asks a replica for subject's first message from from on, and
// the count of those after it.
func (d *directGet) count(ctx context.Context, subject string, from uint64) (uint64, error) {
	from = max(from, 1)
	if err := d.send(getRequest{Seq: from, NextFor: subject, Batch: 1}); err != nil {
		return 0, d.errorf("count of %s from %d: %w", subject, from, err)
	}
	r, err := d.reply(ctx)
	if err != nil {
		return 0, d.errorf("count of %s from %d: %w", subject, from, err)
	}
	switch r.kind {
	case notFound, unavailable:
		return 0, nil
	case endOfBatch:
		return 0, d.errorf("count of %s from %d: an end of batch without a message", subject, from)
	}
	if r.subject != subject || r.seq < from {
		return 0, d.errorf("count of %s from %d: message %d of %s", subject, from, r.seq, r.subject)
	}
	eob, err := d.reply(ctx)
	if err != nil {
		return 0, d.errorf("count of %s from %d: %w", subject, from, err)
	}
	if eob.kind != endOfBatch {
		return 0, d.errorf("count of %s from %d: no end of batch after the message", subject, from)
	}
	return 1 + eob.pending, nil
}

// directGet sends direct gets to one stream and reads their replies on
// one inbox, each reply within a timeout. It is the one place the
// package speaks the direct get protocol. One directGet serves one read.
type directGet struct {
	nc      *nats.Conn
	stream  string
	api     string
	sub     *nats.Subscription
	replies chan *nats.Msg // sub's: replyRoom of them
	timeout time.Duration

	retried, askedLeader bool // for ReadStats, once per read
	lost                 bool // a reply of a read by sequence did not come
}

// replyRoom is how many replies a read's inbox holds unread: what one
// read has in flight at most (a batch and its end, or a window of
// single gets), and room to spare. A synchronous subscription would
// allocate, and clear, room for 65 536 (512 KiB) for every read.
const replyRoom = 2*directBatch + directWindow

func openDirectGet(nc *nats.Conn, stream string, timeout time.Duration) (*directGet, error) {
	replies := make(chan *nats.Msg, replyRoom)
	sub, err := nc.ChanSubscribe(nc.NewInbox(), replies)
	if err != nil {
		return nil, fmt.Errorf("stream %s: direct get: %w", stream, err)
	}
	readStats.reads.Add(1)
	return &directGet{nc: nc, stream: stream, api: "$JS.API.DIRECT.GET." + stream, sub: sub, replies: replies, timeout: timeout}, nil
}

// close drops the subscription, and with it the replies not read.
func (d *directGet) close() { d.sub.Unsubscribe() }

func (d *directGet) errorf(format string, args ...any) error {
	return fmt.Errorf("stream %s: direct get "+format, append([]any{d.stream}, args...)...)
}

// getRequest is a direct get or a stream leader's message get
// (JSApiMsgGetRequest in nats-server).
type getRequest struct {
	Seq       uint64   `json:"seq,omitempty"`
	LastFor   string   `json:"last_by_subj,omitempty"`
	NextFor   string   `json:"next_by_subj,omitempty"`
	Batch     int      `json:"batch,omitempty"`
	MaxBytes  int      `json:"max_bytes,omitempty"`
	MultiLast []string `json:"multi_last,omitempty"`
}

func (d *directGet) send(req getRequest) error {
	body, _ := json.Marshal(req)
	return d.nc.PublishRequest(d.api, d.sub.Subject, body)
}

// readSubject reads subject's messages in [from, to] until it has proven
// it reached the last of them: seeing one at or past to proves it at once
// (a replica that holds a message holds every sequence before it);
// otherwise the subject's last message up to to, from a replica that
// holds to or from the leader, is the target the read must see.
func (d *directGet) readSubject(ctx context.Context, subject string, from, to uint64, fn func(directReply) error) error {
	next, target := max(from, 1), to
	probed := false
	for try := 0; next <= to; try++ {
		var reached uint64
		var err error
		if next, reached, err = d.readBatches(ctx, subject, next, to, fn); err != nil {
			return err
		}
		if reached >= target {
			return nil
		}
		if !probed {
			probed = true
			last, err := d.lastCovering(ctx, subject, to)
			if err != nil {
				return err
			}
			if last == nil || last.Seq < next {
				return nil // nothing of the subject after what was read
			}
			target = min(last.Seq, to)
		}
		// The replica that answered stopped short of a message that is
		// there: it is behind.
		d.stale(1)
		if try >= readRetries {
			return d.leaderRead(ctx, subject, next, to, target, fn)
		}
		if err := d.retry(ctx, try); err != nil {
			return err
		}
	}
	return nil
}

// lastCovering returns the subject's last message as a replica whose last
// stream sequence is at least to sees it, or as the stream leader does;
// nil when the subject has none.
func (d *directGet) lastCovering(ctx context.Context, subject string, to uint64) (*Msg, error) {
	// A read to the end has no sequence a replica could prove it holds:
	// only the leader knows the end.
	for try := 0; to < math.MaxUint64; try++ {
		last, upTo, err := d.multiLast(ctx, subject)
		if err != nil {
			return nil, err
		}
		if last == nil {
			break // nothing of the subject here, which may be a replica behind: the leader knows
		}
		if upTo >= to {
			return last, nil
		}
		d.stale(1)
		if try >= readRetries {
			break
		}
		if err := d.retry(ctx, try); err != nil {
			return nil, err
		}
	}
	return d.leaderGet(ctx, getRequest{LastFor: subject})
}

// multiLast asks a replica for subject's last message: it answers with
// the message and an end of batch whose Nats-UpTo-Sequence is its last
// stream sequence, or with a 404 when it holds no message of the subject.
// Both a 404 and no replica at all (503) return nil.
func (d *directGet) multiLast(ctx context.Context, subject string) (*Msg, uint64, error) {
	if err := d.send(getRequest{MultiLast: []string{subject}}); err != nil {
		return nil, 0, d.errorf("last of %s: %w", subject, err)
	}
	r, err := d.reply(ctx)
	if err != nil {
		return nil, 0, d.errorf("last of %s: %w", subject, err)
	}
	switch r.kind {
	case notFound, unavailable:
		return nil, 0, nil
	case endOfBatch:
		return nil, 0, d.errorf("last of %s: an end of batch without a message", subject)
	}
	eob, err := d.reply(ctx)
	if err != nil {
		return nil, 0, d.errorf("last of %s: %w", subject, err)
	}
	if eob.kind != endOfBatch || eob.upTo == 0 {
		return nil, 0, d.errorf("last of %s: no end of batch with Nats-UpTo-Sequence", subject)
	}
	return &Msg{Subject: r.subject, Seq: r.seq, Data: r.data}, eob.upTo, nil
}

// readRange reads the stream's messages in [from, to] until a reply held
// to or a message past it, or the leader said nothing is left.
func (d *directGet) readRange(ctx context.Context, from, to uint64, fn func(directReply) error) error {
	next := max(from, 1)
	for try := 0; next <= to; try++ {
		var reached uint64
		var err error
		if next, reached, err = d.readBatches(ctx, "", next, to, fn); err != nil {
			return err
		}
		if reached >= to {
			return nil
		}
		// Stopped short of to: a replica behind, or the messages from
		// here on deleted, which only the leader can say.
		d.stale(1)
		if try >= readRetries {
			return d.leaderRead(ctx, ">", next, to, to, fn)
		}
		if err := d.retry(ctx, try); err != nil {
			return err
		}
	}
	return nil
}

// readBatches calls fn for every message from sequence next to to
// (inclusive), on subject when it is not empty, in order, one batch after
// another, until a message at or past to comes or the replica that
// answers says it has nothing more: a 404 (nothing at or after the next
// sequence), or an end of batch with nothing pending; or no replica
// answers (a 503 from the server: none is subscribed there yet, or there
// is no such stream with direct gets). A batch that ends
// with messages pending, however few it held, is followed by the next
// one. It returns the sequence to go on from and the highest sequence a
// reply held (0 for none), which the replica that sent it holds, with
// everything before it.
func (d *directGet) readBatches(ctx context.Context, subject string, next, to uint64, fn func(directReply) error) (uint64, uint64, error) {
	var reached uint64
	for next <= to {
		req := getRequest{Seq: next, NextFor: subject, Batch: directBatch, MaxBytes: min(PullBytes(d.nc), directMaxBytes)}
		if subject == "" {
			req.Batch = int(min(to-next+1, directBatch)) // no more than the range holds
		}
		if err := d.send(req); err != nil {
			return next, reached, d.errorf("from %d: %w", next, err)
		}
		got := 0
	batch:
		for {
			r, err := d.reply(ctx)
			if err != nil {
				return next, reached, d.errorf("from %d: %w", next, err)
			}
			switch r.kind {
			case notFound, unavailable:
				if got > 0 {
					return next, reached, d.errorf("from %d: %s after %d messages of a batch", next, r.kind, got)
				}
				return next, reached, nil // nothing at or after next on the replica, or no replica
			case endOfBatch:
				if r.pending == 0 {
					return next, reached, nil
				}
				if got == 0 {
					return next, reached, d.errorf("from %d: an empty batch with %d messages pending", next, r.pending)
				}
				break batch // cut short, or as many as asked for: go on
			case message:
				if r.seq < next {
					return next, reached, d.errorf("from %d: message %d out of order", next, r.seq)
				}
				got++
				reached = max(reached, r.seq)
				if r.seq > to {
					return next, reached, nil // past the range: what is left of the batch is dropped with the subscription
				}
				if err := fn(r); err != nil {
					return next, reached, err
				}
				next = r.seq + 1
				if r.seq == to {
					return next, reached, nil
				}
			}
		}
	}
	return next, reached, nil
}

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
		for try, lost := 0, 0; len(missing) > 0; {
			more, err := d.askSeqs(ctx, missing, func(r directReply) error {
				got[r.seq] = r.data
				largest = max(largest, len(r.data))
				return nil
			})
			if err != nil {
				return err
			}
			asked := len(missing)
			missing = slices.DeleteFunc(missing, func(seq uint64) bool { _, ok := got[seq]; return ok })
			if len(missing) == 0 {
				break
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
					if m != nil {
						got[seq] = m.Data
					} // else deleted
				}
				break
			}
			if err := d.retry(ctx, try); err != nil {
				return err
			}
			try++
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

type replyKind int

const (
	message     replyKind = iota // a stored message
	endOfBatch                   // 204 EOB
	notFound                     // 404: no message
	unavailable                  // 503: no replica answers here (yet), or there is no such stream with direct gets
)

func (k replyKind) String() string {
	switch k {
	case endOfBatch:
		return "204"
	case notFound:
		return "404"
	case unavailable:
		return "503"
	}
	return "message"
}

// directReply is one reply to a direct get.
type directReply struct {
	kind    replyKind
	seq     uint64 // of a message
	subject string // of a message
	data    []byte // of a message
	pending uint64 // end of batch: messages at or after where the batch stopped
	upTo    uint64 // end of a multi_last batch: the replica's last stream sequence
}

// reply reads the next reply, waiting at most the timeout for it.
func (d *directGet) reply(ctx context.Context) (directReply, error) {
	return d.replyWithin(ctx, d.timeout)
}

// replyWithin reads the next reply, waiting at most wait for it.
func (d *directGet) replyWithin(ctx context.Context, wait time.Duration) (directReply, error) {
	var m *nats.Msg
	select {
	case m = <-d.replies: // there already: no timer needed
	default:
		t := time.NewTimer(wait)
		select {
		case m = <-d.replies:
		case <-ctx.Done():
			t.Stop()
			return directReply{}, ctx.Err()
		case <-t.C:
			return directReply{}, fmt.Errorf("%w in %v", ErrNoReply, wait)
		}
		t.Stop()
	}
	switch status := m.Header.Get("Status"); status {
	case "":
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return directReply{}, errors.New("a message without Nats-Sequence")
		}
		return directReply{kind: message, seq: seq, subject: m.Header.Get("Nats-Subject"), data: m.Data}, nil
	case "204":
		pending, err := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
		if err != nil {
			return directReply{}, errors.New("an end of batch without Nats-Num-Pending")
		}
		upTo, _ := strconv.ParseUint(m.Header.Get("Nats-UpTo-Sequence"), 10, 64)
		return directReply{kind: endOfBatch, pending: pending, upTo: upTo}, nil
	case "404":
		return directReply{kind: notFound}, nil
	case "503": // no responders: no replica answers direct gets
		return directReply{kind: unavailable}, nil
	default: // 408 bad request, 413 too many results, ...
		return directReply{}, fmt.Errorf("status %s %s", status, m.Header.Get("Description"))
	}
}
