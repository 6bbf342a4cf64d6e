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
func PublishAll(ctx context.Context, js jetstream.JetStream, subject string, records [][]byte, msgID func(i int) string) (uint64, error) {
	if limit := js.Conn().MaxPayload(); limit > 0 {
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
// and pipelineAckWait how long it waits for a window's acknowledgements.
// A synchronous publish waits as long for its one acknowledgement; a
// window that gets none in that time will not get it.
const (
	pipelineWindow  = 512
	pipelineAckWait = 30 * time.Second
)

// ErrNoAck is wrapped by the failure of a message whose acknowledgement
// did not come in time: it may be stored or not.
var ErrNoAck = errors.New("no acknowledgement")

// pipeline publishes many messages to streams without waiting for each
// acknowledgement before sending the next: a window of them is sent, then
// their acknowledgements are awaited. It is the one place the package
// writes that way, for PublishAll and Checkpoints.PutAll; js.Publish and
// the key-value API (jetstream.KeyValue.Put) wait for every write's
// acknowledgement in turn, a round trip each.
type pipeline struct {
	js   jetstream.JetStream
	fail func(i int, err error) error // the error of the i-th message published
	// acked, when not nil, is told each acknowledgement, in order.
	acked    func(i int, ack *jetstream.PubAck)
	ackWait  time.Duration
	inFlight []jetstream.PubAckFuture
	first    int    // index of inFlight[0]
	last     uint64 // highest stream sequence acknowledged
}

func newPipeline(js jetstream.JetStream, fail func(i int, err error) error) *pipeline {
	return &pipeline{js: js, fail: fail, ackWait: pipelineAckWait}
}

// publish sends one message, and awaits the window's acknowledgements
// when it is full.
func (p *pipeline) publish(ctx context.Context, subject string, data []byte, opts ...jetstream.PublishOpt) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := p.js.PublishAsync(subject, data, opts...)
	if err != nil {
		return p.fail(p.first+len(p.inFlight), err)
	}
	p.inFlight = append(p.inFlight, f)
	if len(p.inFlight) == pipelineWindow {
		return p.wait(ctx)
	}
	return nil
}

// wait awaits the acknowledgements of the messages in flight, and returns
// the first failure; the messages after it stay in flight, for drain.
func (p *pipeline) wait(ctx context.Context) error {
	timeout := time.NewTimer(p.ackWait)
	defer timeout.Stop()
	for i, f := range p.inFlight {
		var err error
		select {
		case ack := <-f.Ok():
			p.last = max(p.last, ack.Sequence)
			if p.acked != nil {
				p.acked(p.first+i, ack)
			}
			continue
		case err = <-f.Err():
		case <-timeout.C:
			err = fmt.Errorf("%w in %v", ErrNoAck, p.ackWait)
		case <-ctx.Done():
			return ctx.Err()
		}
		err = p.fail(p.first+i, err)
		p.first, p.inFlight = p.first+i+1, p.inFlight[i+1:]
		return err
	}
	p.first, p.inFlight = p.first+len(p.inFlight), p.inFlight[:0]
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
	p.first, p.inFlight = p.first+len(p.inFlight), p.inFlight[:0]
	return stored, nil
}
