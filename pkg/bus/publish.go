package bus

import (
	"context"
	"fmt"

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
