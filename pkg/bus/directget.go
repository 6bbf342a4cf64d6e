package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

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
