package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/streams"
)

// Checkpoint says where a session's projection can be rebuilt from: the
// stream sequence of its latest valid compaction (0 when none is known:
// read the subject from its start) and of its last record. A projection
// is a function of the records from its latest valid compaction on, so
// any checkpoint, however old, rebuilds the same projection; a recent one
// rebuilds it from fewer records.
type Checkpoint struct {
	From uint64 `json:"from"`
	Seq  uint64 `json:"seq"`
}

// Checkpoints is the key-value bucket of session checkpoints.
type Checkpoints struct {
	kv jetstream.KeyValue
}

// OpenCheckpoints opens the checkpoint bucket, creating its stream from
// streams/checkpoints.kv.json when it is missing.
func OpenCheckpoints(ctx context.Context, js jetstream.JetStream, replicas int) (*Checkpoints, error) {
	cfg, err := streams.Checkpoints()
	if err != nil {
		return nil, err
	}
	if replicas > 0 {
		cfg.Replicas = replicas
	}
	if _, err := js.Stream(ctx, cfg.Name); errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("create checkpoint bucket: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("checkpoint bucket: %w", err)
	}
	kv, err := js.KeyValue(ctx, streams.CheckpointsBucket)
	if err != nil {
		return nil, fmt.Errorf("checkpoint bucket: %w", err)
	}
	return &Checkpoints{kv: kv}, nil
}

// Get returns a session's checkpoint; ok is false when it has none.
func (c *Checkpoints) Get(ctx context.Context, session string) (cp Checkpoint, ok bool, err error) {
	e, err := c.kv.Get(ctx, session)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return cp, false, nil
	}
	if err != nil {
		return cp, false, fmt.Errorf("checkpoint %s: %w", session, err)
	}
	if err := json.Unmarshal(e.Value(), &cp); err != nil {
		return cp, false, fmt.Errorf("checkpoint %s: %w", session, err)
	}
	return cp, true, nil
}

// Put stores a session's checkpoint and returns once it is stored.
func (c *Checkpoints) Put(ctx context.Context, session string, cp Checkpoint) error {
	data, _ := json.Marshal(cp)
	if _, err := c.kv.Put(ctx, session, data); err != nil {
		return fmt.Errorf("checkpoint %s: %w", session, err)
	}
	return nil
}

// All returns every stored checkpoint.
func (c *Checkpoints) All(ctx context.Context) (map[string]Checkpoint, error) {
	out := map[string]Checkpoint{}
	w, err := c.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return out, nil
			}
			if e == nil { // initial values delivered
				return out, nil
			}
			var cp Checkpoint
			if err := json.Unmarshal(e.Value(), &cp); err == nil {
				out[e.Key()] = cp
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
