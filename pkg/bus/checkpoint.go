package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/pkg/checkpoint"
	"github.com/ctxd/ctxd/streams"
)

// Checkpoints is the key-value bucket of session checkpoints.
//
// PutAll never replaces a stored checkpoint with an older one
// (checkpoint.Checkpoint.Newer): each write expects the key's revision it last
// read or wrote (Nats-Expected-Last-Subject-Sequence), so of writers that
// race (two instances, a shutdown and the ingest behind it, a rebuild)
// none moves a checkpoint back. It remembers the revision and checkpoint
// of each key it read or wrote, at most maxKnownKeys of them.
type Checkpoints struct {
	js jetstream.JetStream
	// kv is the bucket; bucketMu guards it, since a bucket deleted under
	// ctxd is created again (ensure).
	bucketMu sync.Mutex
	kv       jetstream.KeyValue
	replicas int
	// Stream, when set, names the transcripts stream the checkpoints are
	// of (StreamIdentity): writes carry it, and a read finds no
	// checkpoint where the stored one names another stream (the stream
	// was deleted and created again; its sequences are other records)
	// or none (written before checkpoints named their stream, or by
	// hand): such a checkpoint is not trusted, and any write replaces
	// it.
	Stream string
	// maxValue is the largest value the bucket stores (its max_msg_size,
	// less room for the headers); a checkpoint larger is stored without
	// its index.
	maxValue int

	mu    sync.Mutex
	known map[string]storedCheckpoint
}

// storedCheckpoint is a key's checkpoint as last read or written, and its
// revision (0: the key holds none).
type storedCheckpoint struct {
	rev uint64
	cp  checkpoint.Checkpoint
}

// maxKnownKeys bounds the keys whose revision Checkpoints remembers; past
// it they are forgotten, and read again before they are written.
const maxKnownKeys = 200_000

// checkpointHeaderRoom is what a value leaves of the bucket's
// max_msg_size for the message's headers.
const checkpointHeaderRoom = 256

// OpenCheckpoints opens the checkpoint bucket, creating its stream from
// streams/checkpoints.kv.json when it is missing. The definition is the
// bucket's stream (KV_ name, $KV subjects, one message per key), the form
// `nats stream add --config` takes, so it is created as a stream and then
// opened with the key-value API, which Get, Put and All use; only PutAll
// writes otherwise. A bucket created with a smaller max_msg_size than the
// definition's (before checkpoints held indexes) is raised to it; when
// that fails, checkpoints too large for it are stored without their
// index.
func OpenCheckpoints(ctx context.Context, js jetstream.JetStream, replicas int) (*Checkpoints, error) {
	c := &Checkpoints{js: js, replicas: replicas, known: map[string]storedCheckpoint{}}
	if err := c.open(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// open creates the bucket's stream when it is missing, raises an old
// max_msg_size, and opens the bucket.
func (c *Checkpoints) open(ctx context.Context) error {
	cfg, err := streams.Checkpoints()
	if err != nil {
		return err
	}
	kv, most, err := openBucket(ctx, c.js, cfg, streams.CheckpointsBucket, c.replicas)
	if err != nil {
		return err
	}
	c.bucketMu.Lock()
	c.kv, c.maxValue = kv, most
	c.bucketMu.Unlock()
	return nil
}

// ofStream reports whether a stored checkpoint is of the stream c is of
// (any, when c names none), and clears the name: it is the bucket's
// business, not the checkpoint's. One that names no stream is not of
// it: nothing says which stream's sequences it lists.
func (c *Checkpoints) ofStream(cp *checkpoint.Checkpoint) bool {
	of := c.Stream == "" || cp.Stream == c.Stream
	cp.Stream = ""
	return of
}

// StreamIdentity names a stream for Checkpoints.Stream: its name and
// creation time, which a stream deleted and created again does not share.
func StreamIdentity(info *jetstream.StreamInfo) string {
	return identityOf(info.Config.Name, info.Created)
}

func identityOf(name string, created time.Time) string {
	return name + "@" + created.UTC().Format(time.RFC3339Nano)
}

// bucket returns the bucket as last opened.
func (c *Checkpoints) bucket() jetstream.KeyValue {
	c.bucketMu.Lock()
	defer c.bucketMu.Unlock()
	return c.kv
}

// gone reports whether err says the bucket's stream is not there: an
// operator deleted it (nats kv del, nats stream rm), or, in a cluster, no
// replica answers for a moment. open then creates it again, or finds it
// there.
func gone(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.Is(err, nats.ErrStreamNotFound) // a watch's ordered consumer says it in the older API's terms
}

// reopen opens the bucket again after err said it was gone, forgetting
// every revision it knew: a bucket created again holds none of them.
func (c *Checkpoints) reopen(ctx context.Context, err error) error {
	if oerr := c.open(ctx); oerr != nil {
		return fmt.Errorf("bucket %s: gone (%v), and could not be created again: %w", streams.CheckpointsBucket, err, oerr)
	}
	c.mu.Lock()
	clear(c.known)
	c.mu.Unlock()
	return nil
}

// remember notes a key's checkpoint and revision.
func (c *Checkpoints) remember(session string, rev uint64, cp checkpoint.Checkpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.known) >= maxKnownKeys {
		clear(c.known)
	}
	c.known[session] = storedCheckpoint{rev: rev, cp: cp}
}

func (c *Checkpoints) forget(session string) {
	c.mu.Lock()
	delete(c.known, session)
	c.mu.Unlock()
}

func (c *Checkpoints) lookup(session string) (storedCheckpoint, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.known[session]
	return k, ok
}

// Get returns a session's checkpoint; ok is false when it has none. A
// stored value that does not decode is an error wrapping
// checkpoint.ErrBadCheckpoint.
func (c *Checkpoints) Get(ctx context.Context, session string) (cp checkpoint.Checkpoint, ok bool, err error) {
	e, err := c.bucket().Get(ctx, session)
	if gone(err) {
		if err := c.reopen(ctx, err); err != nil {
			return cp, false, err
		}
		e, err = c.bucket().Get(ctx, session)
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		c.remember(session, 0, cp)
		return cp, false, nil
	}
	if err != nil {
		return cp, false, fmt.Errorf("checkpoint %s: %w", session, err)
	}
	if err := json.Unmarshal(e.Value(), &cp); err != nil {
		c.remember(session, e.Revision(), checkpoint.Checkpoint{}) // any checkpoint replaces it
		return checkpoint.Checkpoint{}, false, fmt.Errorf("checkpoint %s: %w: %w", session, checkpoint.ErrBadCheckpoint, err)
	}
	if !c.ofStream(&cp) {
		c.remember(session, e.Revision(), checkpoint.Checkpoint{}) // any checkpoint replaces it
		return checkpoint.Checkpoint{}, false, nil
	}
	c.remember(session, e.Revision(), cp)
	return cp, true, nil
}

// Put stores a session's checkpoint, whatever the bucket holds, and
// returns once it is stored.
func (c *Checkpoints) Put(ctx context.Context, session string, cp checkpoint.Checkpoint) error {
	data, _ := c.encode(cp)
	_, err := c.bucket().Put(ctx, session, data)
	if gone(err) {
		if err := c.reopen(ctx, err); err != nil {
			return err
		}
		_, err = c.bucket().Put(ctx, session, data)
	}
	if err != nil {
		c.forget(session)
		return fmt.Errorf("checkpoint %s: %w", session, err)
	}
	c.forget(session)
	return nil
}

// encode returns a checkpoint's value, and the checkpoint it stores: one
// too large for the bucket is stored without its index.
func (c *Checkpoints) encode(cp checkpoint.Checkpoint) ([]byte, checkpoint.Checkpoint) {
	if c.Stream != "" {
		cp.Stream = c.Stream
	}
	data, _ := cp.MarshalJSON() // not json.Marshal: it would scan the bytes again
	c.bucketMu.Lock()
	most := c.maxValue
	c.bucketMu.Unlock()
	if len(data) > most && cp.Index != "" {
		cp = cp.WithoutIndex()
		data, _ = cp.MarshalJSON()
	}
	return data, cp
}

// isWrongLast reports whether err is a write refused because the key's
// revision was not the one expected.
func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// putNewer stores cp unless the bucket holds a checkpoint as new, reading
// the key again whenever another writer changed it meanwhile.
func (c *Checkpoints) putNewer(ctx context.Context, session string, cp checkpoint.Checkpoint) error {
	for try := 0; try < 8; try++ {
		k, ok := c.lookup(session)
		if !ok {
			if _, _, err := c.Get(ctx, session); err != nil && !errors.Is(err, checkpoint.ErrBadCheckpoint) {
				return err
			}
			k, _ = c.lookup(session)
		}
		if k.rev > 0 && !cp.Newer(k.cp) {
			return nil // as new or newer there
		}
		data, stored := c.encode(cp)
		rev, err := c.bucket().Update(ctx, session, data, k.rev)
		if gone(err) {
			if err := c.reopen(ctx, err); err != nil {
				return err
			}
			continue // read the key again: the bucket is new
		}
		if err == nil {
			c.remember(session, rev, stored)
			return nil
		}
		c.forget(session)
		if !isWrongLast(err) {
			return fmt.Errorf("checkpoint %s: %w", session, err)
		}
	}
	return fmt.Errorf("checkpoint %s: changed by other writers on every try", session)
}

// PutAll stores many checkpoints, each unless the bucket holds one as new
// (see Checkpoints), without waiting for each to be stored before sending
// the next: the key-value API has no such write, so PutAll publishes to
// the bucket's subject for the key, $KV.<bucket>.<key>, as Put does (the
// bucket is ctxd's own, not a mirror, so that is where its keys are
// stored), expecting the key's revision. A key it knows nothing of is
// written as if it held none, without reading it first (most such keys
// are new sessions'): when it does hold one, the write is refused, like
// one to a key another writer changed meanwhile, and those keys are then
// read again and written alone if still newer, several at a time. It
// returns once all are stored, or with the first error; some of the
// others may be stored by then.
func (c *Checkpoints) PutAll(ctx context.Context, cps iter.Seq2[string, checkpoint.Checkpoint]) error {
	prefix := "$KV." + c.bucket().Bucket() + "."
	var inFlight []flight
	var again []flight
	var firstErr error
	settle := func(keep int) error {
		for len(inFlight) > keep {
			f := inFlight[0]
			inFlight = inFlight[1:]
			t := time.NewTimer(pipelineAckWait)
			select {
			case ack := <-f.ack.Ok():
				c.remember(f.session, ack.Sequence, f.cp)
			case err := <-f.ack.Err():
				c.forget(f.session)
				if isWrongLast(err) || gone(err) {
					// Written alone below: read again, or into the
					// bucket created again.
					again = append(again, f)
				} else if firstErr == nil {
					firstErr = fmt.Errorf("checkpoint %s: %w", f.session, err)
				}
			case <-t.C:
				c.forget(f.session)
				if firstErr == nil {
					firstErr = fmt.Errorf("checkpoint %s: %w in %v", f.session, ErrNoAck, pipelineAckWait)
				}
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			t.Stop()
		}
		return nil
	}
	for session, cp := range cps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !validKey(session) {
			return fmt.Errorf("checkpoint %s: %w", session, jetstream.ErrInvalidKey)
		}
		k, _ := c.lookup(session) // unknown: revision 0, refused if the key holds one
		if k.rev > 0 && !cp.Newer(k.cp) {
			continue
		}
		data, stored := c.encode(cp)
		ack, err := c.js.PublishAsync(prefix+session, data, jetstream.WithExpectLastSequencePerSubject(k.rev))
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", session, err)
		}
		inFlight = append(inFlight, flight{session, stored, ack})
		if err := settle(checkpointWindow - 1); err != nil {
			return err
		}
	}
	if err := settle(0); err != nil {
		return err
	}
	if firstErr != nil {
		return firstErr
	}
	return c.putEach(ctx, again)
}

// putEach writes the checkpoints of refused writes again, each alone
// (putNewer), several at a time: each reads its key first, a round trip
// that would otherwise add up over many keys.
func (c *Checkpoints) putEach(ctx context.Context, again []flight) error {
	if len(again) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan flight)
	var wg sync.WaitGroup
	for range min(len(again), checkpointReaders) {
		wg.Go(func() {
			for f := range work {
				if err := c.putNewer(ctx, f.session, f.cp); err != nil {
					cancel(err)
				}
			}
		})
	}
send:
	for _, f := range again {
		select {
		case work <- f:
		case <-ctx.Done():
			break send
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}

// checkpointReaders is how many refused checkpoint writes putEach reads
// and writes again at a time.
const checkpointReaders = 32

// flight is a checkpoint write PutAll sent and has no answer to yet.
type flight struct {
	session string
	cp      checkpoint.Checkpoint
	ack     jetstream.PubAckFuture
}

// checkpointWindow is how many checkpoint writes PutAll has in flight.
const checkpointWindow = 1024

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
func (c *Checkpoints) All(ctx context.Context) (map[string]checkpoint.Checkpoint, error) {
	out := map[string]checkpoint.Checkpoint{}
	w, err := c.bucket().WatchAll(ctx, jetstream.IgnoreDeletes())
	if gone(err) {
		if err := c.reopen(ctx, err); err != nil {
			return nil, err
		}
		w, err = c.bucket().WatchAll(ctx, jetstream.IgnoreDeletes())
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: list: %w", streams.CheckpointsBucket, err)
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
			var cp checkpoint.Checkpoint
			if err := json.Unmarshal(e.Value(), &cp); err == nil && c.ofStream(&cp) {
				out[e.Key()] = cp
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
