package bus

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/nats-io/nats.go/jetstream"
)

// openBucket opens one of ctxd's key-value buckets, creating its stream
// from cfg (its definition in streams/) when it is missing, with replicas
// when that is above 0. A bucket created with a smaller max_msg_size than
// the definition's is raised to it; when that fails, the bucket's own
// holds. It returns the bucket and the largest value it stores (its
// max_msg_size, less room for the headers).
func openBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, bucket string, replicas int) (jetstream.KeyValue, int, error) {
	if replicas > 0 {
		cfg.Replicas = replicas
	}
	maxMsg := cfg.MaxMsgSize
	if st, err := js.Stream(ctx, cfg.Name); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, 0, fmt.Errorf("bucket %s: create: %w", bucket, err)
		}
	} else if err != nil {
		return nil, 0, fmt.Errorf("bucket %s: %w", bucket, err)
	} else if have := st.CachedInfo().Config; have.MaxMsgSize > 0 && have.MaxMsgSize < cfg.MaxMsgSize {
		maxMsg = have.MaxMsgSize
		have.MaxMsgSize = cfg.MaxMsgSize
		if _, err := js.UpdateStream(ctx, have); err == nil {
			maxMsg = cfg.MaxMsgSize
		}
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, 0, fmt.Errorf("bucket %s: %w", bucket, err)
	}
	most := math.MaxInt
	if maxMsg > 0 {
		most = max(int(maxMsg)-checkpointHeaderRoom, 0)
	}
	return kv, most, nil
}
