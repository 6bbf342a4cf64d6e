package bus

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"iter"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/streams"
)

// Snapshots is the key-value bucket of session snapshots: per session, an
// encoding of its projection at a record (store.Snapshot), written at
// shutdown, of idle sessions and of evicted ones, so that a load reads
// none of the session's records up to it.
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

// Get returns a session's snapshot; ok is false when it has none. A
// snapshot stored in parts whose parts are not all of one write (one in
// progress, or one that failed half-way) is none.
func (s *Snapshots) Get(ctx context.Context, session string) (data []byte, ok bool, err error) {
	data, ok, err = s.get(ctx, session)
	if err != nil || !ok || !bytes.HasPrefix(data, partsMagic) {
		return data, ok, err
	}
	h, err := parseParts(data)
	if err != nil {
		return nil, false, fmt.Errorf("snapshot %s: %w", session, err)
	}
	whole := make([]byte, 0, h.total)
	for i := 1; i <= h.parts; i++ {
		part, ok, err := s.get(ctx, partKey(session, i))
		if err != nil || !ok {
			return nil, false, err
		}
		if len(part) < 8 || binary.BigEndian.Uint64(part) != h.id || len(whole)+len(part)-8 > h.total {
			return nil, false, nil // of another write
		}
		whole = append(whole, part[8:]...)
	}
	if len(whole) != h.total || crc32.Checksum(whole, partsTable) != h.sum {
		return nil, false, nil
	}
	return whole, true, nil
}

// get reads one value of the bucket.
func (s *Snapshots) get(ctx context.Context, key string) (data []byte, ok bool, err error) {
	kv, _ := s.bucket()
	e, err := kv.Get(ctx, key)
	if gone(err) {
		if err := s.open(ctx); err != nil {
			return nil, false, err
		}
		kv, _ = s.bucket()
		e, err = kv.Get(ctx, key)
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("snapshot %s: %w", key, err)
	}
	return e.Value(), true, nil
}

// A snapshot larger than the bucket's largest value is stored in parts:
// at the session's key a head, partsMagic then the write's id (8 bytes,
// big-endian), the count of parts and the snapshot's length (uvarints)
// and its CRC-32C (4 bytes, big-endian); at <session>.part<i>, from 1,
// the id then the i-th slice of the snapshot. A session is one subject
// token, so no session's key holds a dot. The parts are written before
// the head, in order on one connection: a head names parts already
// stored, and a reader that finds parts of another write (the id, the
// length or the checksum differ) takes the snapshot for none.
var partsMagic = []byte("ctxd\x00parts\x01")

// maxSnapshotParts bounds the parts of one snapshot: one of more is too
// large.
const maxSnapshotParts = 64

var partsTable = crc32.MakeTable(crc32.Castagnoli)

func partKey(session string, i int) string { return session + ".part" + strconv.Itoa(i) }

// partsHead is a parted snapshot's head.
type partsHead struct {
	id    uint64
	parts int
	total int
	sum   uint32
}

func appendParts(buf []byte, h partsHead) []byte {
	buf = append(buf, partsMagic...)
	buf = binary.BigEndian.AppendUint64(buf, h.id)
	buf = binary.AppendUvarint(buf, uint64(h.parts))
	buf = binary.AppendUvarint(buf, uint64(h.total))
	return binary.BigEndian.AppendUint32(buf, h.sum)
}

// errBadParts is the error of a parted snapshot's head that does not
// decode.
var errBadParts = errors.New("parted snapshot's head does not decode")

// parseParts decodes a head; data starts with partsMagic.
func parseParts(data []byte) (partsHead, error) {
	b := data[len(partsMagic):]
	if len(b) < 8 {
		return partsHead{}, errBadParts
	}
	h := partsHead{id: binary.BigEndian.Uint64(b)}
	b = b[8:]
	parts, k := binary.Uvarint(b)
	if k <= 0 || parts == 0 || parts > maxSnapshotParts {
		return partsHead{}, errBadParts
	}
	b = b[k:]
	total, k := binary.Uvarint(b)
	if k <= 0 || total > parts<<30 {
		return partsHead{}, errBadParts
	}
	b = b[k:]
	if len(b) != 4 {
		return partsHead{}, errBadParts
	}
	h.parts, h.total, h.sum = int(parts), int(total), binary.BigEndian.Uint32(b)
	return h, nil
}

// PutAll stores snapshots, several in flight at a time, as
// Checkpoints.PutAll does. A snapshot larger than the bucket's largest
// value is stored in parts (see partsMagic); one of more than
// maxSnapshotParts parts is not written: tooLarge counts them. It
// returns once all others are stored, or with the first error.
func (s *Snapshots) PutAll(ctx context.Context, snaps iter.Seq2[string, []byte]) (written, tooLarge int, err error) {
	kv, most := s.bucket()
	prefix := "$KV." + kv.Bucket() + "."
	type flight struct {
		session string
		ack     jetstream.PubAckFuture
		head    bool // the snapshot's last write: it counts as written
	}
	var inFlight []flight
	settle := func(keep int) error {
		for len(inFlight) > keep {
			f := inFlight[0]
			inFlight = inFlight[1:]
			t := time.NewTimer(pipelineAckWait)
			select {
			case <-f.ack.Ok():
				if f.head {
					written++
				}
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
		room := most - 8 // a part's id
		parts := (len(data) + room - 1) / room
		if len(data) > most && parts > maxSnapshotParts {
			tooLarge++
			continue
		}
		if len(data) > most {
			h := partsHead{id: rand.Uint64(), parts: parts, total: len(data), sum: crc32.Checksum(data, partsTable)}
			for i := 1; i <= parts; i++ {
				part := binary.BigEndian.AppendUint64(make([]byte, 0, 8+room), h.id)
				part = append(part, data[(i-1)*room:min(i*room, len(data))]...)
				ack, err := s.js.PublishAsync(prefix+partKey(session, i), part)
				if err != nil {
					return written, tooLarge, fmt.Errorf("snapshot %s: %w", session, err)
				}
				inFlight = append(inFlight, flight{session, ack, false})
				if err := settle(snapshotWindow - 1); err != nil {
					return written, tooLarge, err
				}
			}
			data = appendParts(nil, h)
		}
		ack, err := s.js.PublishAsync(prefix+session, data)
		if err != nil {
			return written, tooLarge, fmt.Errorf("snapshot %s: %w", session, err)
		}
		inFlight = append(inFlight, flight{session, ack, true})
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
