package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
const (
	// directBatch is how many messages one batched direct get asks for.
	directBatch = 256
	// directMaxBytes is the max_bytes of a batched direct get: about this
	// much, plus one message, is in flight per batch, well within what a
	// subscription buffers (64 MiB), so no reply is dropped as a slow
	// consumer's.
	directMaxBytes = 16 << 20
	// directWindow is how many single direct gets ReadSeqs has in flight.
	directWindow = 128
)

// DirectTimeout is how long a direct get waits for each reply. A reply
// that has not come by then is taken as lost and the read fails with
// ErrNoReply, rather than wait on: a lost reply must not hang a session's
// load or the ingest. The caller's context can end a read sooner.
const DirectTimeout = 5 * time.Second

// ErrNoReply is wrapped by the error of a direct get whose reply did not
// come within DirectTimeout.
var ErrNoReply = errors.New("no reply")

// ReadSubject calls fn for every message stored on subject with a stream
// sequence from from to to (inclusive), in order, with batched direct gets:
// a few round trips however many sessions share the stream, and no
// consumer.
func ReadSubject(ctx context.Context, nc *nats.Conn, stream, subject string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	d, err := openDirectGet(nc, stream, DirectTimeout)
	if err != nil {
		return err
	}
	defer d.close()
	return d.readBatches(ctx, subject, from, to, func(r directReply) error { return fn(r.seq, r.data) })
}

// ReadRange calls fn for every message of the stream with a sequence from
// from to to (inclusive), whatever its subject, in order, with batched
// direct gets. Deleted sequences are skipped.
func ReadRange(ctx context.Context, nc *nats.Conn, stream string, from, to uint64, fn func(m Msg) error) error {
	d, err := openDirectGet(nc, stream, DirectTimeout)
	if err != nil {
		return err
	}
	defer d.close()
	return d.readBatches(ctx, "", from, to, func(r directReply) error {
		return fn(Msg{Subject: r.subject, Seq: r.seq, Data: r.data})
	})
}

// ReadSeqs calls fn for the messages at the given stream sequences, in
// the order given, with single direct gets pipelined a window at a time:
// each is a lookup by sequence, however the stream's subjects interleave.
// A sequence with no message (deleted) is skipped.
func ReadSeqs(ctx context.Context, nc *nats.Conn, stream string, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	d, err := openDirectGet(nc, stream, DirectTimeout)
	if err != nil {
		return err
	}
	defer d.close()
	return d.readSeqs(ctx, seqs, fn)
}

// directGet sends direct gets to one stream and reads their replies on
// one inbox, each reply within a timeout. It is the one place the
// package speaks the direct get protocol.
type directGet struct {
	nc      *nats.Conn
	stream  string
	api     string
	sub     *nats.Subscription
	timeout time.Duration
}

func openDirectGet(nc *nats.Conn, stream string, timeout time.Duration) (*directGet, error) {
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return nil, fmt.Errorf("stream %s: direct get: %w", stream, err)
	}
	return &directGet{nc: nc, stream: stream, api: "$JS.API.DIRECT.GET." + stream, sub: sub, timeout: timeout}, nil
}

// close drops the subscription, and with it the replies not read.
func (d *directGet) close() { d.sub.Unsubscribe() }

func (d *directGet) errorf(format string, args ...any) error {
	return fmt.Errorf("stream %s: direct get "+format, append([]any{d.stream}, args...)...)
}

// batchRequest is a batched direct get (JSApiMsgGetRequest in
// nats-server).
type batchRequest struct {
	Seq      uint64 `json:"seq"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes"`
}

// readBatches calls fn for every message from sequence from to to
// (inclusive), on subject when it is not empty, in order, one batch after
// another. It returns once the end is proven: a message at or past to, a
// 404 (nothing at or after the next sequence), or an end of batch with
// nothing pending. A batch that ends with messages pending, however few
// it held, is followed by the next one.
func (d *directGet) readBatches(ctx context.Context, subject string, from, to uint64, fn func(directReply) error) error {
	next := max(from, 1)
	for next <= to {
		req := batchRequest{Seq: next, NextFor: subject, Batch: directBatch, MaxBytes: directMaxBytes}
		if subject == "" {
			req.Batch = int(min(to-next+1, directBatch)) // no more than the range holds
		}
		body, _ := json.Marshal(req)
		if err := d.nc.PublishRequest(d.api, d.sub.Subject, body); err != nil {
			return d.errorf("from %d: %w", next, err)
		}
		got := 0
	batch:
		for {
			r, err := d.reply(ctx)
			if err != nil {
				return d.errorf("from %d: %w", next, err)
			}
			switch r.kind {
			case notFound:
				if got > 0 {
					return d.errorf("from %d: 404 after %d messages of a batch", next, got)
				}
				return nil // nothing at or after next
			case endOfBatch:
				if r.pending == 0 {
					return nil
				}
				if got == 0 {
					return d.errorf("from %d: an empty batch with %d messages pending", next, r.pending)
				}
				break batch // cut short, or as many as asked for: go on
			case message:
				if r.seq < next {
					return d.errorf("from %d: message %d out of order", next, r.seq)
				}
				got++
				if r.seq > to {
					return nil // past the range: what is left of the batch is dropped with the subscription
				}
				if err := fn(r); err != nil {
					return err
				}
				if r.seq == to {
					return nil
				}
				next = r.seq + 1
			}
		}
	}
	return nil
}

// readSeqs gets each sequence with a single direct get, a window of them
// in flight at a time. Replies may come in any order (the replicas of a
// stream answer direct gets too), so they are matched by sequence: every
// request has one reply, a message or a 404.
func (d *directGet) readSeqs(ctx context.Context, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	var req []byte
	got := make(map[uint64][]byte, min(len(seqs), directWindow))
	for start := 0; start < len(seqs); start += directWindow {
		part := seqs[start:min(start+directWindow, len(seqs))]
		for _, seq := range part {
			req = strconv.AppendUint(append(req[:0], `{"seq":`...), seq, 10)
			req = append(req, '}')
			if err := d.nc.PublishRequest(d.api, d.sub.Subject, req); err != nil {
				return d.errorf("of %d: %w", seq, err)
			}
		}
		clear(got)
		for range part {
			r, err := d.reply(ctx)
			if err != nil {
				return d.errorf("of %d sequences from %d: %w", len(part), part[0], err)
			}
			switch r.kind {
			case notFound: // deleted
			case message:
				got[r.seq] = r.data
			default:
				return d.errorf("of %d sequences from %d: an end of batch answers no batch", len(part), part[0])
			}
		}
		for _, seq := range part {
			if data, ok := got[seq]; ok {
				if err := fn(seq, data); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

type replyKind int

const (
	message    replyKind = iota // a stored message
	endOfBatch                  // 204 EOB
	notFound                    // 404: no message
)

// directReply is one reply to a direct get.
type directReply struct {
	kind    replyKind
	seq     uint64 // of a message
	subject string // of a message
	data    []byte // of a message
	pending uint64 // end of batch: messages at or after where the batch stopped
}

// reply reads the next reply, waiting at most the timeout for it.
func (d *directGet) reply(ctx context.Context) (directReply, error) {
	var m *nats.Msg
	var err error
	if n, _, _ := d.sub.Pending(); n > 0 {
		m, err = d.sub.NextMsgWithContext(ctx) // there already: no timer needed
	} else {
		wait, cancel := context.WithTimeout(ctx, d.timeout)
		m, err = d.sub.NextMsgWithContext(wait)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w in %v", ErrNoReply, d.timeout)
		}
	}
	if err != nil {
		return directReply{}, err
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
		return directReply{kind: endOfBatch, pending: pending}, nil
	case "404":
		return directReply{kind: notFound}, nil
	default: // 408 bad request, 413 too many results, 503 no responders (no such stream, or no allow_direct), ...
		return directReply{}, fmt.Errorf("status %s %s", status, m.Header.Get("Description"))
	}
}
