package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// errHeadersDone ends readHeaders from its fn before the last message.
var errHeadersDone = errors.New("headers read far enough")

// readHeaders reads the messages cfg selects with an ordered consumer
// that delivers headers only (cfg.HeadersOnly is set here): however large
// the records, only their headers travel. fn is called for each, in
// stream order; it ends the read early by returning errHeadersDone. The
// consumer is deleted after, rather than left to its inactivity
// threshold. It reads as many messages as the consumer said were pending
// when it was made, and those counted meanwhile.
//
// The server loads each message whole from its store to send its
// headers, so the batches are sized to hold about headerBatchBytes of
// messages (from their Nats-Msg-Size): a session of screenshots is read a
// few records at a time, and fn, which may wait, paces the next batch.
// The consumer's creation is asked again while a cluster that lost its
// leaders does not answer (retryAPI).
func readHeaders(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig, fn func(m jetstream.Msg, meta *jetstream.MsgMetadata) error) error {
	cfg.HeadersOnly = true
	var cons jetstream.Consumer
	err := retryAPI(ctx, func(ctx context.Context) (err error) {
		cons, err = js.OrderedConsumer(ctx, stream, cfg)
		return err
	})
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	defer func() {
		if name := cons.CachedInfo().Name; name != "" {
			js.DeleteConsumer(context.WithoutCancel(ctx), stream, name)
		}
	}()
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer info: %w", err)
	}
	pending := info.NumPending
	retries := 0
	batchSize := firstHeaderBatch
	var seen, seenBytes int64
	for pending > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := 0
		batch, err := cons.Fetch(int(min(pending, uint64(batchSize))), jetstream.FetchMaxWait(5*time.Second))
		if err == nil {
			for m := range batch.Messages() {
				n++
				meta, err := m.Metadata()
				if err != nil {
					return fmt.Errorf("metadata: %w", err)
				}
				pending = meta.NumPending
				if size, err := strconv.Atoi(m.Headers().Get(nats.MsgSize)); err == nil && size > 0 {
					seen, seenBytes = seen+1, seenBytes+int64(size)
				}
				if err := fn(m, meta); errors.Is(err, errHeadersDone) {
					return nil
				} else if err != nil {
					return err
				}
			}
			err = batch.Error()
		}
		switch {
		case err == nil || errors.Is(err, nats.ErrTimeout):
		case errors.Is(err, nats.ErrNoResponders) && retries < fetchRetries:
			// Each fetch of an ordered consumer may make a consumer, from
			// the last message delivered; in a cluster the server this
			// connection uses may not know it yet.
			retries++
			select {
			case <-time.After(time.Duration(retries) * 20 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		default:
			return fmt.Errorf("fetch: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("%d messages announced, none delivered", pending)
		}
		retries = 0
		if seenBytes > 0 {
			batchSize = int(min(max(headerBatchBytes*seen/seenBytes, 1), maxHeaderBatch))
		}
	}
	return nil
}

// firstHeaderBatch, headerBatchBytes and maxHeaderBatch size the batches
// of readHeaders: the first of one message (its size unknown, it may be a
// screenshot), each after it of about headerBatchBytes of messages by the
// mean size seen, between 1 and maxHeaderBatch messages.
const (
	firstHeaderBatch = 1
	headerBatchBytes = 4 << 20
	maxHeaderBatch   = 1000
)

// fetchRetries is how many times in a row readHeaders fetches again when
// no server answered a fetch.
const fetchRetries = 5
