package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// Layout says where a stream stores a session's records: with P
// partitions on transcripts.<k>.<session>, and, on a stream partitioned
// after it had records, those up to After possibly still on
// transcripts.<session> (the transform applies to new records only;
// nothing is moved or renumbered). Every read of a session goes through
// it.
type Layout struct {
	Stream string
	P      int
	After  uint64
}

// LayoutOf returns the layout of a TRANSCRIPTS stream configuration.
func LayoutOf(cfg jetstream.StreamConfig) (Layout, error) {
	p, after, err := streams.PartitionsOf(cfg)
	if err != nil {
		return Layout{}, err
	}
	return Layout{Stream: cfg.Name, P: p, After: after}, nil
}

// Partitioned reports whether the stream has partitions.
func (l Layout) Partitioned() bool { return l.P > 1 }

// Subject returns the subject a session's records are stored on now.
func (l Layout) Subject(session string) string { return subject.Stored(session, l.P) }

// SubjectAt names the subject a session's record at seq is stored on:
// its partition's for a record stored after the stream was partitioned
// (seq > After), transcripts.<session> otherwise (where every record of
// an unpartitioned stream is, and most of those up to After).
func (l Layout) SubjectAt(session string, seq uint64) string {
	if l.P > 1 && seq > l.After {
		return subject.Stored(session, l.P)
	}
	return subject.TranscriptsPrefix + session
}

// mixed reports whether a session's records up to After may be on its
// unpartitioned subject.
func (l Layout) mixed() bool { return l.P > 1 && l.After > 0 }

// ReadSubject reads a session's records in [from, to] in order, as
// ReadSubject does, on both its subjects when the stream was partitioned
// after it had records.
func (l Layout) ReadSubject(ctx context.Context, nc *nats.Conn, session string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	if !l.mixed() || from > l.After {
		return ReadSubject(ctx, nc, l.Stream, l.Subject(session), from, to, fn)
	}
	// The records before the transform, in memory (a session's, since
	// from), then merged with the later subject's by sequence.
	type rec struct {
		seq  uint64
		data []byte
	}
	var old []rec
	err := ReadSubject(ctx, nc, l.Stream, subject.TranscriptsPrefix+session, from, min(to, l.After), func(seq uint64, data []byte) error {
		old = append(old, rec{seq, data})
		return nil
	})
	if err != nil {
		return err
	}
	err = ReadSubject(ctx, nc, l.Stream, l.Subject(session), from, to, func(seq uint64, data []byte) error {
		for len(old) > 0 && old[0].seq < seq {
			if err := fn(old[0].seq, old[0].data); err != nil {
				return err
			}
			old = old[1:]
		}
		return fn(seq, data)
	})
	if err != nil {
		return err
	}
	for _, r := range old {
		if err := fn(r.seq, r.data); err != nil {
			return err
		}
	}
	return nil
}

// ReadSubjectSeqs reads a session's records at seqs, as ReadSubjectSeqs
// does. On a stream partitioned after it had records, an index that
// names a sequence up to After is reported stale (store.ErrIndexStale):
// the store then reads the session's subjects instead.
func (l Layout) ReadSubjectSeqs(ctx context.Context, nc *nats.Conn, session string, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	if l.mixed() && len(seqs) > 0 && seqs[0] <= l.After {
		return fmt.Errorf("stream %s: sequence %d may be on %s, stored before the stream was partitioned: %w", l.Stream, seqs[0], subject.TranscriptsPrefix+session, store.ErrIndexStale)
	}
	return ReadSubjectSeqs(ctx, nc, l.Stream, l.Subject(session), seqs, fn)
}

// Count returns how many records of a session the stream holds with a
// sequence at or after from, as CountSubject counts them, on both its
// subjects when the stream was partitioned after it had records.
func (l Layout) Count(ctx context.Context, nc *nats.Conn, session string, from uint64) (uint64, error) {
	n, err := CountSubject(ctx, nc, l.Stream, l.Subject(session), from)
	if err != nil || !l.mixed() || from > l.After {
		return n, err
	}
	old, err := CountSubject(ctx, nc, l.Stream, subject.TranscriptsPrefix+session, from)
	return n + old, err
}

// LastOf returns a session's last record and a stream sequence up to
// which that is proven, as LastOf does, over both its subjects when the
// stream was partitioned after it had records.
func (l Layout) LastOf(ctx context.Context, nc *nats.Conn, session string) (*Msg, uint64, error) {
	last, upTo, err := LastOf(ctx, nc, l.Stream, l.Subject(session))
	if err != nil || !l.mixed() {
		return last, upTo, err
	}
	old, oldUpTo, err := LastOf(ctx, nc, l.Stream, subject.TranscriptsPrefix+session)
	if err != nil {
		return nil, 0, err
	}
	if old != nil && (last == nil || old.Seq > last.Seq) {
		last = old
	}
	return last, min(upTo, oldUpTo), nil
}

// ReadPartition calls fn for partition k's records with a sequence in
// [from, to], in order, with batched direct gets on transcripts.<k>.*.
// through is a record of the partition past to that the stream is known
// to hold (the one the ingest was just delivered): the read goes on until
// a replica shows it, so a replica behind never makes records look
// absent; after a few tries the stream leader reads the rest.
func ReadPartition(ctx context.Context, nc *nats.Conn, stream string, k int, from, to, through uint64, fn func(Msg) error) error {
	filter := subject.PartitionFilter(k) + "*"
	next := max(from, 1)
	hand := func(r directReply) error {
		if r.seq > to {
			return nil
		}
		if err := fn(Msg{Subject: r.subject, Seq: r.seq, Data: r.data}); err != nil {
			return err
		}
		next = r.seq + 1
		return nil
	}
	return attempt(ctx, nc, stream, func(d *directGet) error {
		for try := 0; next <= to; try++ {
			_, reached, err := d.readBatches(ctx, filter, next, through, hand)
			if err != nil {
				return err
			}
			if reached >= through {
				return nil
			}
			d.stale(1)
			if try >= readRetries {
				return d.leaderRead(ctx, filter, next, to, through, hand)
			}
			if err := d.retry(ctx, try); err != nil {
				return err
			}
		}
		return nil
	})
}

// Partition makes a TRANSCRIPTS stream store its records in p partitions
// from now on (a stream update that adds the subject transform), and
// records in its metadata the last sequence stored before: the records
// up to it stay where they are, on transcripts.<session>, with their
// sequences, and Layout reads both. A stream already in p partitions is
// left as it is; one in another number of partitions is refused.
//
// The update and the sequence read after it are two steps: a record
// stored between them is on either subject, and the sequence covers it.
func Partition(ctx context.Context, js jetstream.JetStream, stream string, p int) (Layout, error) {
	if p < 2 || p > streams.MaxPartitions {
		return Layout{}, fmt.Errorf("partitions: %d; 2 to %d", p, streams.MaxPartitions)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return Layout{}, fmt.Errorf("stream %s: %w", stream, err)
	}
	cfg := st.CachedInfo().Config
	have, err := LayoutOf(cfg)
	if err != nil {
		return Layout{}, err
	}
	if have.P == p {
		return have, nil
	}
	if have.P > 1 {
		return Layout{}, fmt.Errorf("%w: stream %s has %d partitions already; the number of partitions is fixed for a stream's life", ErrIncompatible, stream, have.P)
	}
	cfg.SubjectTransform = streams.PartitionTransform(p)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return Layout{}, fmt.Errorf("stream %s: add the partition transform: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return Layout{}, fmt.Errorf("stream %s: %w", stream, err)
	}
	after := info.State.LastSeq
	if after > 0 {
		cfg = info.Config
		if cfg.Metadata == nil {
			cfg.Metadata = map[string]string{}
		}
		cfg.Metadata[streams.PartitionedAfter] = strconv.FormatUint(after, 10)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			// The transform is on and the boundary not written: ctxd would
			// not read the records before it. Say so loudly.
			return Layout{}, fmt.Errorf("stream %s: the transform is added, but the metadata %s=%d could not be written (write it, or ctxd does not read the records stored before): %w", stream, streams.PartitionedAfter, after, err)
		}
	}
	return Layout{Stream: stream, P: p, After: after}, nil
}

// ErrPartitions is wrapped by the error of a partition count that is not
// the stream's.
var ErrPartitions = errors.New("partitions")
