package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publish stores one record on subject and returns its stream sequence.
// msgID, when not empty, is sent as Nats-Msg-Id so a retry within the
// stream's duplicate window is stored once.
func Publish(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string) (uint64, error) {
	m := &nats.Msg{Subject: subject, Data: data}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	ack, err := js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return 0, fmt.Errorf("publish to %s: %w", subject, err)
	}
	return ack.Sequence, nil
}

// PublishAll stores records on subject, in order, pipelined (see
// pipeline), and returns the highest stream sequence acknowledged: that
// of the last record. msgID, when not nil, gives record i (from 0) its
// Nats-Msg-Id, so that publishing the same records again within the
// stream's duplicate window stores none twice.
//
// A record larger than the server's max payload is refused before any
// record is sent (the error wraps nats.ErrMaxPayload). Otherwise the
// error names the first record not stored; records after it may be
// stored or not.
func PublishAll(ctx context.Context, nc *nats.Conn, subject string, records [][]byte, msgID func(i int) string) (uint64, error) {
	js, err := JetStream(nc)
	if err != nil {
		return 0, err
	}
	if limit := nc.MaxPayload(); limit > 0 {
		for i, r := range records {
			if int64(len(r)) > limit {
				return 0, fmt.Errorf("record %d is %d bytes, more than the server's max_payload of %d (%w): nothing was published", i+1, len(r), limit, nats.ErrMaxPayload)
			}
		}
	}
	p := newPipeline(js, func(i int, err error) error {
		return fmt.Errorf("record %d of %d not stored: %w", i+1, len(records), err)
	})
	for i, r := range records {
		var opts []jetstream.PublishOpt
		if msgID != nil {
			opts = append(opts, jetstream.WithMsgID(msgID(i)))
		}
		if err := p.publish(ctx, subject, r, opts...); err != nil {
			return 0, err
		}
	}
	if err := p.wait(ctx); err != nil {
		return 0, err
	}
	return p.last, nil
}

// pipelineWindow is how many messages a pipeline has in flight at most,
// below the client's 4000 pending asynchronous publishes (more fail with
// ErrTooManyStalledMsgs when the server lags), and pipelineWindowBytes
// how many bytes of data, which the client holds until acknowledged (a
// message larger goes alone). Both leave the server messages to store
// while acknowledgements travel, when the ingest shares its CPU: with
// ctxd serve ingesting, a window of 512 made ctxd import of a 100 MB file
// a quarter slower, one of 2048 about 6%. pipelineAckWait is how long a
// pipeline waits for an acknowledgement: a synchronous publish waits as
// long for its one; a message that gets none in that time will not get
// it.
const (
	pipelineWindow      = 3584
	pipelineWindowBytes = 64 << 20
	pipelineAckWait     = 30 * time.Second
)

// ErrNoAck is wrapped by the failure of a message whose acknowledgement
// did not come in time: it may be stored or not.
var ErrNoAck = errors.New("no acknowledgement")

// pipeline publishes many messages to streams without waiting for each
// acknowledgement before sending the next: up to a window of them are in
// flight, and once the window is full each message sent waits for the
// acknowledgement of the oldest (a sliding window: the server always has
// messages to store). PublishAll and Append write through it; the
// checkpoint and snapshot buckets' PutAll keep windows of their own
// (revisions, retries, one value's failure named); js.Publish and the
// key-value API (jetstream.KeyValue.Put) wait for every write's
// acknowledgement in turn, a round trip each.
type pipeline struct {
	js   jetstream.JetStream
	fail func(i int, err error) error // the error of the i-th message published
	// acked, when not nil, is told each acknowledgement, in order.
	acked    func(i int, ack *jetstream.PubAck)
	ackWait  time.Duration
	inFlight []jetstream.PubAckFuture
	sizes    []int  // the data's length of each message in flight
	bytes    int    // their sum
	first    int    // index of inFlight[0]
	last     uint64 // highest stream sequence acknowledged
}

func newPipeline(js jetstream.JetStream, fail func(i int, err error) error) *pipeline {
	return &pipeline{js: js, fail: fail, ackWait: pipelineAckWait}
}

// publish sends one message, after the acknowledgements of the oldest
// messages in flight that it needs room for in the window.
func (p *pipeline) publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for len(p.inFlight) >= pipelineWindow || len(p.inFlight) > 0 && p.bytes+len(data) > pipelineWindowBytes {
		if err := p.await(ctx, len(p.inFlight)-1); err != nil {
			return err
		}
	}
	f, err := p.js.PublishAsync(subject, data, opts...)
	if err != nil {
		return p.fail(p.first+len(p.inFlight), err)
	}
	p.inFlight, p.sizes = append(p.inFlight, f), append(p.sizes, len(data))
	p.bytes += len(data)
	return nil
}

// wait awaits the acknowledgements of the messages in flight (see await).
func (p *pipeline) wait(ctx context.Context) error { return p.await(ctx, 0) }

// await awaits acknowledgements, oldest first, until at most keep
// messages are in flight, and returns the first failure; the messages
// after it stay in flight, for drain. It waits at most ackWait.
func (p *pipeline) await(ctx context.Context, keep int) error {
	var timeout <-chan time.Time
	for len(p.inFlight) > keep {
		f := p.inFlight[0]
		var ack *jetstream.PubAck
		var err error
		select {
		case ack = <-f.Ok():
		case err = <-f.Err():
		default:
			if timeout == nil {
				t := time.NewTimer(p.ackWait)
				defer t.Stop()
				timeout = t.C
			}
			select {
			case ack = <-f.Ok():
			case err = <-f.Err():
			case <-timeout:
				err = fmt.Errorf("%w in %v", ErrNoAck, p.ackWait)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		i := p.first
		p.first, p.inFlight, p.bytes, p.sizes = p.first+1, p.inFlight[1:], p.bytes-p.sizes[0], p.sizes[1:]
		if err != nil {
			return p.fail(i, err)
		}
		p.last = max(p.last, ack.Sequence)
		if p.acked != nil {
			p.acked(i, ack)
		}
	}
	return nil
}

// drain awaits the acknowledgements of the messages still in flight after
// wait failed, and returns how many say stored (not as duplicates).
func (p *pipeline) drain(ctx context.Context) (stored int, err error) {
	timeout := time.NewTimer(p.ackWait)
	defer timeout.Stop()
	for _, f := range p.inFlight {
		select {
		case ack := <-f.Ok():
			if !ack.Duplicate {
				stored++
			}
		case <-f.Err():
		case <-timeout.C:
			return stored, fmt.Errorf("%w in %v", ErrNoAck, p.ackWait)
		case <-ctx.Done():
			return stored, ctx.Err()
		}
	}
	p.first, p.inFlight, p.sizes, p.bytes = p.first+len(p.inFlight), p.inFlight[:0], p.sizes[:0], 0
	return stored, nil
}
