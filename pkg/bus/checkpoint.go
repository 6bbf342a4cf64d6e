package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/streams"
)

// Checkpoints is the key-value bucket of session checkpoints.
type Checkpoints struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// OpenCheckpoints opens the checkpoint bucket, creating its stream from
// streams/checkpoints.kv.json when it is missing. The definition is the
// bucket's stream (KV_ name, $KV subjects, one message per key), the form
// `nats stream add --config` takes, so it is created as a stream and then
// opened with the key-value API, which Get, Put and All use; only PutAll
// writes otherwise.
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
			return nil, fmt.Errorf("bucket %s: create: %w", streams.CheckpointsBucket, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", streams.CheckpointsBucket, err)
	}
	kv, err := js.KeyValue(ctx, streams.CheckpointsBucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", streams.CheckpointsBucket, err)
	}
	return &Checkpoints{js: js, kv: kv}, nil
}

// Get returns a session's checkpoint; ok is false when it has none.
func (c *Checkpoints) Get(ctx context.Context, session string) (cp store.Checkpoint, ok bool, err error) {
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
func (c *Checkpoints) Put(ctx context.Context, session string, cp store.Checkpoint) error {
	data, _ := json.Marshal(cp)
	if _, err := c.kv.Put(ctx, session, data); err != nil {
		return fmt.Errorf("checkpoint %s: %w", session, err)
	}
	return nil
}

// PutAll stores many checkpoints, the way Put stores one, without waiting
// for each to be stored before sending the next (see pipeline): the
// key-value API has no such write, so PutAll publishes to the bucket's
// subject for the key, $KV.<bucket>.<key>, as Put does (the bucket is
// ctxd's own, not a mirror, so that is where its keys are stored). It
// returns once all are stored, or with the first error; some of the
// others may be stored by then.
func (c *Checkpoints) PutAll(ctx context.Context, cps iter.Seq2[string, store.Checkpoint]) error {
	prefix := "$KV." + c.kv.Bucket() + "."
	keys := make([]string, pipelineWindow) // of the checkpoints in flight, by index modulo the window
	p := newPipeline(c.js, func(i int, err error) error {
		return fmt.Errorf("checkpoint %s: %w", keys[i%pipelineWindow], err)
	})
	n := 0
	for session, cp := range cps {
		if !validKey(session) {
			return fmt.Errorf("checkpoint %s: %w", session, jetstream.ErrInvalidKey)
		}
		data, _ := json.Marshal(cp)
		keys[n%pipelineWindow] = session
		n++
		if err := p.publish(ctx, prefix+session, data); err != nil {
			return err
		}
	}
	return p.wait(ctx)
}

// validKey reports whether a key is one the bucket takes, as Put checks.
func validKey(k string) bool {
	if k == "" || k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, "..") {
		return false
	}
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '/', c == '_', c == '=', c == '.':
		default:
			return false
		}
	}
	return true
}

// All returns every stored checkpoint.
func (c *Checkpoints) All(ctx context.Context) (map[string]store.Checkpoint, error) {
	out := map[string]store.Checkpoint{}
	w, err := c.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("bucket %s: list: %w", c.kv.Bucket(), err)
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
			var cp store.Checkpoint
			if err := json.Unmarshal(e.Value(), &cp); err == nil {
				out[e.Key()] = cp
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
