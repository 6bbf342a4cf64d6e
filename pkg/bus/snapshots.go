package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/streams"
)

// Snapshots is the key-value bucket of session snapshots: per session, an
// encoding of its projection at a record (store.Snapshot), written at
// shutdown, so that the first load after a restart reads none of the
// session's records up to it.
//
// A snapshot is a hint, like a checkpoint: the store checks it before it
// uses it, and one missing, old or refused only makes a load read more
// records. So writes are plain puts, not guarded by revision: a snapshot
// older than the one it replaces is still a true state of the session, at
// an earlier record.
type Snapshots struct {
	js       jetstream.JetStream
	replicas int

	mu       sync.Mutex
	kv       jetstream.KeyValue
	maxValue int // the largest value the bucket stores
}

// snapshotWindow is how many snapshot writes PutAll has in flight: about
// 100 KB each for a 200-record session.
const snapshotWindow = 64

// OpenSnapshots opens the snapshot bucket, creating its stream from
// streams/snapshots.kv.json when it is missing.
func OpenSnapshots(ctx context.Context, js jetstream.JetStream, replicas int) (*Snapshots, error) {
	s := &Snapshots{js: js, replicas: replicas}
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Snapshots) open(ctx context.Context) error {
	cfg, err := streams.Snapshots()
	if err != nil {
		return err
	}
	kv, most, err := openBucket(ctx, s.js, cfg, streams.SnapshotsBucket, s.replicas)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.kv, s.maxValue = kv, most
	s.mu.Unlock()
	return nil
}

func (s *Snapshots) bucket() (jetstream.KeyValue, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kv, s.maxValue
}

// Get returns a session's snapshot; ok is false when it has none.
func (s *Snapshots) Get(ctx context.Context, session string) (data []byte, ok bool, err error) {
	kv, _ := s.bucket()
	e, err := kv.Get(ctx, session)
	if gone(err) {
		if err := s.open(ctx); err != nil {
			return nil, false, err
		}
		kv, _ = s.bucket()
		e, err = kv.Get(ctx, session)
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("snapshot %s: %w", session, err)
	}
	return e.Value(), true, nil
}

// PutAll stores snapshots, several in flight at a time, as
// Checkpoints.PutAll does. A snapshot larger than the bucket takes is not
// written: tooLarge counts them. It returns once all others are stored,
// or with the first error.
func (s *Snapshots) PutAll(ctx context.Context, snaps iter.Seq2[string, []byte]) (written, tooLarge int, err error) {
	kv, most := s.bucket()
	prefix := "$KV." + kv.Bucket() + "."
	type flight struct {
		session string
		ack     jetstream.PubAckFuture
	}
	var inFlight []flight
	settle := func(keep int) error {
		for len(inFlight) > keep {
			f := inFlight[0]
			inFlight = inFlight[1:]
			t := time.NewTimer(pipelineAckWait)
			select {
			case <-f.ack.Ok():
				written++
			case err := <-f.ack.Err():
				t.Stop()
				return fmt.Errorf("snapshot %s: %w", f.session, err)
			case <-t.C:
				return fmt.Errorf("snapshot %s: %w in %v", f.session, ErrNoAck, pipelineAckWait)
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			t.Stop()
		}
		return nil
	}
	for session, data := range snaps {
		if err := ctx.Err(); err != nil {
			return written, tooLarge, err
		}
		if !validKey(session) {
			return written, tooLarge, fmt.Errorf("snapshot %s: %w", session, jetstream.ErrInvalidKey)
		}
		if len(data) > most {
			tooLarge++
			continue
		}
		ack, err := s.js.PublishAsync(prefix+session, data)
		if err != nil {
			return written, tooLarge, fmt.Errorf("snapshot %s: %w", session, err)
		}
		inFlight = append(inFlight, flight{session, ack})
		if err := settle(snapshotWindow - 1); err != nil {
			return written, tooLarge, err
		}
	}
	err = settle(0)
	return written, tooLarge, err
}

// snapshotStateKey holds what the snapshots in the bucket were written
// at: the stream's identity and removed count. A session's key never
// holds a dot (a session is one subject token), so it is no session's.
const snapshotStateKey = "ctxd.state"

// SnapshotState is what the snapshots in the bucket were written at.
type SnapshotState struct {
	Stream  string `json:"stream"`
	Removed uint64 `json:"removed"`
}

// MarkState records what the snapshots just written were written at.
func (s *Snapshots) MarkState(ctx context.Context, st SnapshotState) error {
	data, _ := json.Marshal(st)
	kv, _ := s.bucket()
	if _, err := kv.Put(ctx, snapshotStateKey, data); err != nil {
		return fmt.Errorf("bucket %s: %w", streams.SnapshotsBucket, err)
	}
	return nil
}

// Sweep empties the bucket unless its snapshots were written at now: a
// snapshot written at another removed count, or of another stream, is
// never used again (the count only grows), and may hold records removed
// from the stream since. The bucket, empty, is then marked as written at
// now, so that the next start finds nothing to sweep. It reports whether
// it removed any snapshot.
func (s *Snapshots) Sweep(ctx context.Context, now SnapshotState) (bool, error) {
	kv, _ := s.bucket()
	e, err := kv.Get(ctx, snapshotStateKey)
	marked := err == nil
	if marked {
		var st SnapshotState
		if json.Unmarshal(e.Value(), &st) == nil && st == now {
			return false, nil
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, fmt.Errorf("bucket %s: %w", streams.SnapshotsBucket, err)
	}
	st, err := s.js.Stream(ctx, "KV_"+streams.SnapshotsBucket)
	if err != nil {
		return false, fmt.Errorf("bucket %s: %w", streams.SnapshotsBucket, err)
	}
	held := st.CachedInfo().State.Msgs
	if marked {
		held-- // the state's own key
	}
	if err := st.Purge(ctx); err != nil {
		return false, fmt.Errorf("bucket %s: purge: %w", streams.SnapshotsBucket, err)
	}
	return held > 0, s.MarkState(ctx, now)
}

// Purge removes every snapshot: records left the stream, so none is
// used again, and what they hold of those records must go too.
func (s *Snapshots) Purge(ctx context.Context) error {
	st, err := s.js.Stream(ctx, "KV_"+streams.SnapshotsBucket)
	if err == nil {
		err = st.Purge(ctx)
	}
	if err != nil {
		return fmt.Errorf("bucket %s: purge: %w", streams.SnapshotsBucket, err)
	}
	return nil
}
