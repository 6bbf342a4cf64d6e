package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Partitions asks the service for the stream's number of partitions
// ($SRV.INFO metadata), 1 when it has none: the first instance to answer
// says.
func Partitions(ctx context.Context, nc *nats.Conn) (int, error) {
	reply, err := nc.RequestWithContext(ctx, "$SRV.INFO.ctxd", nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, ErrNoService
	}
	if err != nil {
		return 0, fmt.Errorf("$SRV.INFO.ctxd: %w", err)
	}
	var info struct {
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(reply.Data, &info); err != nil {
		return 0, fmt.Errorf("$SRV.INFO.ctxd: %w", err)
	}
	p, err := strconv.Atoi(info.Metadata["partitions"])
	if err != nil || p < 1 {
		return 1, nil
	}
	return p, nil
}

// Instance is a ctxd instance that answered $SRV.PING.
type Instance struct {
	// ID is the service's id; Name its instance name (host:pid unless
	// set); Stream the stream it serves ("" for a ctxd that does not say).
	ID, Name, Stream string
}

// Instances lists the ctxd instances that answer $SRV.PING.ctxd within
// wait: every one the connection's account reaches.
func Instances(ctx context.Context, nc *nats.Conn, wait time.Duration) ([]Instance, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("$SRV.PING.ctxd: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.PING.ctxd", inbox, nil); err != nil {
		return nil, fmt.Errorf("$SRV.PING.ctxd: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var out []Instance
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, nats.ErrNoResponders) {
				return out, nil
			}
			return out, fmt.Errorf("$SRV.PING.ctxd: %w", err)
		}
		var ping struct {
			ID       string            `json:"id"`
			Metadata map[string]string `json:"metadata"`
		}
		if json.Unmarshal(m.Data, &ping) != nil || ping.ID == "" {
			continue
		}
		out = append(out, Instance{ID: ping.ID, Name: ping.Metadata["instance"], Stream: ping.Metadata["stream"]})
	}
}
