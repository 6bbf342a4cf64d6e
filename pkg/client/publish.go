package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/subject"
)

// ErrPublish is wrapped by the errors of a record the stream did not
// store (its PubAck says why).
var ErrPublish = errors.New("record not stored")

// Publish stores one record (a JSON object or a msgpack map, as
// CONTEXT.md describes) on the session's subject, transcripts.<session>,
// and returns the stream sequence its PubAck gives: pass it as
// Request.MinSeq to read the context that holds it. msgID, when not "",
// is sent as Nats-Msg-Id: the stream stores a record of a given id once
// within its duplicate window, and a repeat returns the first one's
// sequence. It is JetStream's publish, a request to the subject whose
// reply is the PubAck, so any language does the same.
func Publish(ctx context.Context, nc *nats.Conn, session string, record []byte, msgID string) (uint64, error) {
	subj, err := subject.Transcript(session)
	if err != nil {
		return 0, err
	}
	msg := nats.NewMsg(subj)
	msg.Data = record
	if msgID != "" {
		msg.Header.Set("Nats-Msg-Id", msgID)
	}
	reply, err := nc.RequestMsgWithContext(ctx, msg)
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, fmt.Errorf("publish to %s: no stream stores it (is ctxd serve running?): %w", subj, err)
	}
	if err != nil {
		return 0, fmt.Errorf("publish to %s: %w", subj, err)
	}
	var ack struct {
		Stream string `json:"stream"`
		Seq    uint64 `json:"seq"`
		Error  *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return 0, fmt.Errorf("publish to %s: the reply is not a PubAck: %w", subj, err)
	}
	if ack.Error != nil {
		return 0, fmt.Errorf("%w: publish to %s: %d %s", ErrPublish, subj, ack.Error.Code, ack.Error.Description)
	}
	if ack.Seq == 0 {
		return 0, fmt.Errorf("publish to %s: the reply is not a PubAck: %.200s", subj, reply.Data)
	}
	return ack.Seq, nil
}
