package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/importer"
	"github.com/ctxd/ctxd/pkg/subject"
)

// importPublisher publishes converted transcripts, a Nats-Msg-Id per
// record.
type importPublisher struct {
	nc *nats.Conn
	e  *env
	// The stream that stores transcripts.>, found once; ready is closed
	// when stream or err is set.
	ready  chan struct{}
	stream *bus.Stream
	err    error
}

// findStream looks up the stream that stores the transcripts.
func (p *importPublisher) findStream(ctx context.Context) {
	defer close(p.ready)
	if p.stream, p.err = bus.FindStream(ctx, p.nc, subject.TranscriptsPrefix+">"); p.err != nil {
		if ctx.Err() == nil {
			p.err = fmt.Errorf("%w (is ctxd serve running?)", p.err)
		}
		return
	}
	// The records already there are found through the layout: one that
	// misses some would publish them again.
	l, err := p.stream.Layout()
	if err == nil {
		err = bus.CheckLayout(ctx, p.nc, l)
	}
	if err != nil {
		p.stream, p.err = nil, err
	}
}

// importAckWait is how long the import waits for a record's
// acknowledgement; 0 for pkg/bus's default. Tests shorten it.
var importAckWait time.Duration

type importResult struct {
	published int  // stored by this import
	present   int  // found in the stream before publishing, not sent
	abandoned int  // in the stream, imported from the format, not produced by the file
	rewound   bool // a compaction of the file's branch was published before the rest
	duplicate int  // sent, and dropped by the server as duplicates
	held      int  // unsettled, held back by a following import
	last      uint64
}

// importMsgID is the Nats-Msg-Id of an imported record: the format, the
// session and the record's own ID, so the same source record imported into
// two sessions is two records.
func importMsgID(format importer.Format, session, id string) string {
	return "import:" + string(format) + ":" + session + ":" + id
}

// publish stores a transcript's records that the session's stream does not
// hold yet, in order.
//
// A following import (following) does two things more. Records of the
// format the session holds after the ones of the file, and that the file
// no longer produces (a branch the tool abandoned), are followed by a
// compaction of the file's branch up to them before the rest is appended.
// And the transcript's unsettled records, which the tool may still write
// again, are held back: published once the file goes on past them, so
// that the session gets their last version.
func (p *importPublisher) publish(ctx context.Context, t *importer.Transcript, session string, following bool) (importResult, error) {
	var res importResult
	subj, err := subject.Transcript(session)
	if err != nil {
		return res, err
	}
	select {
	case <-p.ready:
	case <-ctx.Done():
		return res, ctx.Err()
	}
	if p.err != nil {
		return res, fmt.Errorf("%s: %w", t.Name, p.err)
	}
	log, lastSeq, err := p.sessionLog(ctx, session)
	if err != nil {
		return res, fmt.Errorf("%s: %w", t.Name, err)
	}
	stream := log.Stream
	limit, maxMsg := p.nc.MaxPayload(), log.MaxMsgSize

	// Size everything first: a record too large fails the whole session,
	// before anything of it is published, so that its order is kept.
	ids := make([]string, len(t.Records))
	var tooBig []string
	for i := range t.Records {
		r := &t.Records[i] // Size keeps the encoding of a record kept as a value, for JSON
		n, err := r.Size()
		if err != nil {
			return res, fmt.Errorf("%s: %s: encode record: %w", t.Name, r.Where, err)
		}
		ids[i] = importMsgID(t.Format, session, r.ID)
		// Both limits count the headers.
		size := int64(n)
		withHeaders := size + int64(bus.AppendHeaderBytes(ids[i]))
		record := func(most int64) string {
			s := fmt.Sprintf("%s: %s: %s record of %d bytes", t.Name, r.Where, withArticle(r.Class()), size)
			if size <= most {
				s += fmt.Sprintf(", %d with its headers", withHeaders)
			}
			return s
		}
		if limit > 0 && withHeaders > limit {
			tooBig = append(tooBig, fmt.Sprintf("%s; the server accepts at most %d (its max_payload)", record(limit), limit))
		} else if maxMsg > 0 && withHeaders > maxMsg {
			tooBig = append(tooBig, fmt.Sprintf("%s; stream %s stores at most %d (its max_msg_size)", record(maxMsg), stream, maxMsg))
		}
	}
	if len(tooBig) > 0 {
		return res, fmt.Errorf("%s\nnothing of session %s was published: raise the limit and import again", strings.Join(tooBig, "\n"), session)
	}

	// The session must hold the file's first records, in the file's order
	// (records of other sources may come between them), and no other
	// record of the file: the rest is appended after them. A hole (a
	// record a stream limit deleted, or that an import failed to store
	// while records after it were stored) cannot be filled in the file's
	// order any more: refuse rather than append out of order.
	state, bad := storedState(log.IDs, ids, importMsgID(t.Format, session, ""))
	if bad != nil {
		return res, bad.describe(t, session)
	}
	done, abandoned := state.n, state.abandoned
	res.present, res.abandoned, res.last = done, abandoned, lastSeq
	end := len(t.Records)
	if following {
		end = max(done, end-t.Unsettled)
	}
	res.held = len(t.Records) - end
	todo := t.Records[done:end]
	if following && (abandoned > 0 || state.context < done) {
		// The tool went on from an earlier point than the session's last
		// records: a compaction of the branch it continues, up to the
		// fork, comes before the rest, so that the context follows the
		// tool. The abandoned records stay in the stream.
		c, err := importer.Rewind(t, done, rewindID(done, lastSeq), abandoned)
		if err != nil {
			return res, fmt.Errorf("%s: rewind: %w", t.Name, err)
		}
		cid := importMsgID(t.Format, session, c.ID)
		n, err := c.Size()
		if err != nil {
			return res, fmt.Errorf("%s: %s: encode record: %w", t.Name, c.Where, err)
		}
		size := int64(n) + int64(bus.AppendHeaderBytes(cid))
		if (limit > 0 && size > limit) || (maxMsg > 0 && size > maxMsg) {
			return res, fmt.Errorf("%s: the compaction of %s is %d bytes with its headers, more than the server or stream %s accepts; nothing of session %s was published: raise the limit, or import the file into a new --session", t.Name, c.Where, size, stream, session)
		}
		todo = append([]importer.Record{c}, todo...)
		ids = append(ids[:done:done], append([]string{cid}, ids[done:]...)...)
		res.rewound, res.abandoned = true, 0
	}
	var prog *progress
	if pr := newProgress(p.e.stderr, "import "+t.Name, uint64(len(todo))); pr.tty && len(todo) > 0 {
		prog = pr
	}
	// The records' bytes are made ahead, on another processor, while the
	// publisher sends the ones before.
	enc := encodeAhead(ctx, todo, importAhead)
	defer enc.stop()
	// bus.Append stores the records right after the session's last one,
	// in the file's order, and stops at the first that fails; records
	// sent before the failure was known may be stored after it, leaving
	// the session without it: it says so, and importing again refuses
	// (above) rather than append it out of order.
	out, err := p.stream.Append(ctx, bus.AppendRecords{
		Subject: subj,
		After:   log.Last,
		N:       len(todo),
		Data:    enc.next,
		MsgID:   func(i int) string { return ids[done+i] },
		Progress: func(acked int) {
			if prog != nil {
				prog.update(uint64(acked))
			}
		},
		AckWait: importAckWait,
	})
	res.published, res.duplicate = out.Stored, out.Duplicate
	res.last = max(res.last, out.Last)
	if prog != nil {
		prog.finish(uint64(res.published + res.duplicate))
	}
	if re := (*bus.RecordError)(nil); errors.As(err, &re) {
		if errors.Is(err, bus.ErrSubjectMoved) {
			return res, fmt.Errorf("%s: session %s got records from elsewhere while the import read it; nothing was published: import again (%w)", t.Name, session, re.Err)
		}
		err := fmt.Errorf("%s: %s: record not stored: %w", t.Name, todo[re.Index].Where, re.Err)
		if errors.Is(err, bus.ErrNoAck) {
			return res, fmt.Errorf("%w; it and the records after it may be stored or not: importing again goes on from what session %s holds, or refuses if it lacks a record before ones it holds", err, session)
		}
		if re.StoredAfter > 0 {
			return res, fmt.Errorf("%w; %d records after it were stored all the same: session %s lacks it, and importing the file into it again refuses: import the file into a new --session", err, re.StoredAfter, session)
		}
		return res, fmt.Errorf("%w; session %s holds the records before it: importing again goes on from it", err, session)
	} else if err != nil {
		return res, err
	}
	return res, nil
}

// importGCPercent is the garbage collector's GOGC during an import, when
// the environment sets none.
const importGCPercent = 400

// importAhead is how many records an import's encoder makes ahead of
// the one being sent.
const importAhead = 64

// withArticle puts "a" or "an" before a record's class ("a user", "an
// assistant").
func withArticle(class string) string {
	if class != "" && strings.ContainsRune("aeio", rune(class[0])) {
		return "an " + class
	}
	return "a " + class
}

// sessionLog reads the ids of a session's records where the stream
// stores them: on a partitioned stream, transcripts.<k>.<session>, after
// those still on transcripts.<session> when it was partitioned with
// records. Its Last is the stored subject's last sequence, the one the
// server checks a publish's expected last subject sequence against;
// last is the session's last sequence on either.
func (p *importPublisher) sessionLog(ctx context.Context, session string) (log *bus.SubjectLog, last uint64, err error) {
	l, err := p.stream.Layout()
	if err != nil {
		return nil, 0, err
	}
	log, err = p.stream.ReadSubjectLog(ctx, l.Subject(session))
	if err != nil || !l.Partitioned() || l.After == 0 {
		if log != nil {
			last = log.Last
		}
		return log, last, err
	}
	old, err := p.stream.ReadSubjectLog(ctx, subject.TranscriptsPrefix+session)
	if err != nil {
		return nil, 0, err
	}
	log.IDs = append(old.IDs, log.IDs...)
	return log, max(log.Last, old.Last), nil
}
