package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/pkg/checkpoint"
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
// names a sequence up to After is reported stale (checkpoint.ErrIndexStale):
// the store then reads the session's subjects instead.
func (l Layout) ReadSubjectSeqs(ctx context.Context, nc *nats.Conn, session string, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	if l.mixed() && len(seqs) > 0 && seqs[0] <= l.After {
		return fmt.Errorf("stream %s: sequence %d may be on %s, stored before the stream was partitioned: %w", l.Stream, seqs[0], subject.TranscriptsPrefix+session, checkpoint.ErrIndexStale)
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
// from now on (the subject transform), and records in its metadata the
// last sequence stored before (streams.PartitionedAfter): the records up
// to it stay where they are, on transcripts.<session>, with their
// sequences, and Layout reads both. A stream already in p partitions is
// left as it is, once finished (below); one in another number of
// partitions is refused.
//
// The transform and the metadata go in one stream update, the metadata
// holding the stream's last sequence read just before it: a crash leaves
// the stream as it was, or partitioned. A record stored between that read
// and the update is on transcripts.<session> past the metadata, where no
// read through the layout would look: Partition then raises the metadata
// over it, in a second update. A stream left between the two (by a
// crash, or by an earlier ctxd, which wrote the transform and the
// metadata in two updates) is unfinished: CheckLayout says so, and
// Partition run again finishes it, emptying first the snapshot and
// checkpoint buckets, which a ctxd that read it wrong may have written.
func Partition(ctx context.Context, nc *nats.Conn, stream string, p int) (Partitioning, error) {
	if p < 2 || p > streams.MaxPartitions {
		return Partitioning{}, fmt.Errorf("partitions: %d; 2 to %d", p, streams.MaxPartitions)
	}
	js, err := JetStream(nc)
	if err != nil {
		return Partitioning{}, err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return Partitioning{}, fmt.Errorf("stream %s: %w", stream, err)
	}
	info := st.CachedInfo()
	have, err := LayoutOf(info.Config)
	if err != nil {
		return Partitioning{}, err
	}
	if have.P > 1 && have.P != p {
		err := fmt.Errorf("%w: stream %s has %d partitions already; the number of partitions is fixed for a stream's life", ErrIncompatible, stream, have.P)
		if uerr := CheckLayout(ctx, js.Conn(), have); uerr != nil {
			err = fmt.Errorf("%w; and %w", err, uerr)
		}
		return Partitioning{}, err
	}
	unfinished := false
	if have.P == 1 {
		cfg := info.Config
		cfg.SubjectTransform = streams.PartitionTransform(p)
		cfg.Metadata = withAfter(cfg.Metadata, info.State.LastSeq)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return Partitioning{}, fmt.Errorf("stream %s: add the partition transform: %w", stream, err)
		}
	} else {
		var ue *UnfinishedError
		switch err := CheckLayout(ctx, js.Conn(), have); {
		case errors.As(err, &ue):
			// The buckets first: a crash before the metadata is raised
			// leaves the stream unfinished, and the next run empties them
			// again.
			unfinished = true
			for _, bucket := range []string{streams.SnapshotsBucket, streams.CheckpointsBucket} {
				if err := emptyBucket(ctx, js, bucket); err != nil {
					return Partitioning{}, fmt.Errorf("stream %s: its partitioning was not finished, and %w", stream, err)
				}
			}
		case err != nil:
			return Partitioning{}, err
		}
	}
	l, err := finishPartition(ctx, js, st)
	if err != nil {
		return Partitioning{}, err
	}
	return Partitioning{Layout: l, Finished: unfinished}, nil
}

// Partitioning is what Partition did.
type Partitioning struct {
	Layout
	// Finished is set when the stream was found partitioned but
	// unfinished, and Partition finished it: the snapshot and checkpoint
	// buckets were emptied too.
	Finished bool
}

// finishTries bounds the updates finishPartition makes: each covers
// every record stored before it, so a second one is needed only when the
// first was read before the transform.
const finishTries = 5

// finishPartition raises a partitioned stream's metadata over the
// records on transcripts.<session> past it, until there is none.
func finishPartition(ctx context.Context, js jetstream.JetStream, st jetstream.Stream) (Layout, error) {
	for try := 0; ; try++ {
		info, err := st.Info(ctx)
		if err != nil {
			return Layout{}, fmt.Errorf("stream %s: %w", st.CachedInfo().Config.Name, err)
		}
		l, err := LayoutOf(info.Config)
		if err != nil {
			return Layout{}, err
		}
		err = CheckLayout(ctx, js.Conn(), l)
		var ue *UnfinishedError
		if !errors.As(err, &ue) || try == finishTries {
			return l, err
		}
		// The transform was in place when info was read: every record
		// stored since is on a partitioned subject, so the last sequence
		// then bounds those on transcripts.<session>.
		cfg := info.Config
		cfg.Metadata = withAfter(cfg.Metadata, max(info.State.LastSeq, ue.Seq))
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return Layout{}, fmt.Errorf("stream %s: the partition transform is in place, but the metadata %s could not be raised over record %d on %s (run ctxd partition --partitions %d again): %w", l.Stream, streams.PartitionedAfter, ue.Seq, ue.Subject, l.P, err)
		}
	}
}

// withAfter returns a stream's metadata with PartitionedAfter set to
// after, or without it when after is 0 (no record before the transform).
func withAfter(md map[string]string, after uint64) map[string]string {
	out := maps.Clone(md)
	if out == nil {
		out = map[string]string{}
	}
	delete(out, streams.PartitionedAfter)
	if after > 0 {
		out[streams.PartitionedAfter] = strconv.FormatUint(after, 10)
	}
	return out
}

// UnfinishedError says that a stream's partitioning was stopped half
// way: the stream has the partition transform, but a record on
// transcripts.<session> stored past the sequence its metadata names as
// the last before it, which no read through its layout finds.
type UnfinishedError struct {
	Stream  string
	P       int    // partitions of the transform
	After   uint64 // the sequence the metadata names (0: none)
	Seq     uint64 // the last record on transcripts.<session>
	Subject string // its subject
}

func (e *UnfinishedError) Error() string {
	after := "none"
	if e.After > 0 {
		after = strconv.FormatUint(e.After, 10)
	}
	return fmt.Sprintf("stream %s: its partitioning was not finished: it stores new records in %d partitions, but record %d on %s is past the last sequence its metadata %s names as stored before (%s), and would not be read: run ctxd partition --partitions %d to finish it",
		e.Stream, e.P, e.Seq, e.Subject, streams.PartitionedAfter, after, e.P)
}

// CheckLayout checks a stream's layout against what the stream stores:
// on a partitioned stream no record may be on transcripts.<session> past
// l.After, since the transform stores every record published after it on
// its partition's subject. One that is there was stored before the
// transform, but after the sequence the metadata names: the error is an
// *UnfinishedError. The stream leader answers, so a replica behind does
// not hide the record.
func CheckLayout(ctx context.Context, nc *nats.Conn, l Layout) error {
	if !l.Partitioned() {
		return nil
	}
	var last *Msg
	err := attempt(ctx, nc, l.Stream, func(d *directGet) (err error) {
		last, err = d.leaderGet(ctx, getRequest{LastFor: subject.TranscriptsPrefix + "*"})
		return err
	})
	if err != nil {
		return fmt.Errorf("stream %s: check the partition layout: %w", l.Stream, err)
	}
	if last != nil && last.Seq > l.After {
		return &UnfinishedError{Stream: l.Stream, P: l.P, After: l.After, Seq: last.Seq, Subject: last.Subject}
	}
	return nil
}

// emptyBucket purges a key-value bucket's stream, if there is one.
func emptyBucket(ctx context.Context, js jetstream.JetStream, bucket string) error {
	st, err := js.Stream(ctx, "KV_"+bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err == nil {
		err = st.Purge(ctx)
	}
	if err != nil {
		return fmt.Errorf("bucket %s not emptied: %w", bucket, err)
	}
	return nil
}

// ErrPartitions is wrapped by the error of a partition count that is not
// the stream's.
var ErrPartitions = errors.New("partitions")
