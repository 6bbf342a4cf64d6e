package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// AppendRecords are the records Append stores at the end of a subject.
type AppendRecords struct {
	Subject string
	// After is the stream sequence of the subject's last message, which
	// the first record must follow (0 when the subject holds none), as
	// ReadSubjectLog read it.
	After uint64
	N     int
	// Data returns the bytes of record i (from 0). It is called as the
	// record is sent, while the server stores the ones before.
	Data func(i int) ([]byte, error)
	// MsgID returns the Nats-Msg-Id of record i.
	MsgID func(i int) string
	// Progress, when not nil, is told how many records are acknowledged,
	// as they are.
	Progress func(acked int)
	// AckWait is how long Append waits for an acknowledgement; 0 for the
	// pipeline's 30 s.
	AckWait time.Duration
}

// Appended is what Append did.
type Appended struct {
	Stored int // records stored
	// Duplicate counts the records the server dropped as duplicates: it
	// held them already (stored within its duplicate window).
	Duplicate int
	Last      uint64 // the highest stream sequence acknowledged
}

// A RecordError is the failure of one record of Append. The records
// before it are stored.
type RecordError struct {
	Index int // the record's, from 0
	Err   error
	// StoredAfter counts the records after it that the server stored all
	// the same: they were sent before its failure was known. The subject
	// then lacks the record, before them.
	StoredAfter int
}

func (e *RecordError) Error() string {
	msg := fmt.Sprintf("record %d not stored: %v", e.Index+1, e.Err)
	if e.StoredAfter > 0 {
		msg += fmt.Sprintf(" (%d records after it stored)", e.StoredAfter)
	}
	return msg
}

func (e *RecordError) Unwrap() error { return e.Err }

// ErrSubjectMoved is wrapped by the error of a first record refused
// because the subject's last message is no longer at AppendRecords.After:
// another publisher wrote to the subject since.
var ErrSubjectMoved = errors.New("the subject got a message from elsewhere since it was read")

// Append stores records at the end of a subject, in order, pipelined (a
// window of records in flight, each acknowledgement awaited at most
// AckWait). The first record carries
// Nats-Expected-Last-Subject-Sequence: After, so that it is stored right
// after the message the caller read last, or not at all.
//
// The order of the records that are stored is always theirs: one
// connection's messages reach the stream in the order sent, and no record
// is sent again (the client's retry of a message no server answered is
// off, as it would send the record after the ones sent after it). A
// record can fail while the ones after it are stored, though: the server
// refuses it (a stream limit, a denial) and not them, or the cluster
// changes its leader between them. A pipeline cannot prevent that: the
// server can only make a record wait for its predecessor through the
// predecessor's stream sequence (Nats-Expected-Last-Subject-Sequence),
// unknown until its acknowledgement comes, and a replicated stream
// refuses that check while the subject has messages in flight. (The one
// check by message id, Nats-Expected-Last-Msg-Id, compares with the
// stream's last message, which other publishers move, and a mismatch on
// a replicated stream stops the stream's writes in nats-server 2.15.) So
// Append stops at the first failure and returns a *RecordError, after the
// acknowledgements still in flight, which say how many records after the
// failed one were stored: the caller knows the subject lacks a record
// before them. When no acknowledgement came in time, the record and
// those after it may be stored or not, in order.
func Append(ctx context.Context, js jetstream.JetStream, r AppendRecords) (Appended, error) {
	var res Appended
	p := newPipeline(js, func(i int, err error) error {
		if i == 0 && isWrongLastSequence(err) {
			err = fmt.Errorf("%w (%w)", ErrSubjectMoved, err)
		}
		return &RecordError{Index: i, Err: err}
	})
	if r.AckWait > 0 {
		p.ackWait = r.AckWait
	}
	p.acked = func(i int, ack *jetstream.PubAck) {
		if ack.Duplicate {
			res.Duplicate++
		} else {
			res.Stored++
		}
		res.Last = max(res.Last, ack.Sequence)
		if r.Progress != nil {
			r.Progress(i + 1)
		}
	}
	err := func() error {
		for i := range r.N {
			data, err := r.Data(i)
			if err != nil {
				if werr := p.wait(ctx); werr != nil {
					return werr
				}
				return &RecordError{Index: i, Err: err}
			}
			opts := []jetstream.PublishOpt{jetstream.WithMsgID(r.MsgID(i)), jetstream.WithRetryAttempts(0)}
			if i == 0 {
				opts = append(opts, jetstream.WithExpectLastSequencePerSubject(r.After))
			}
			if err := p.publish(ctx, r.Subject, data, opts...); err != nil {
				return err
			}
		}
		return p.wait(ctx)
	}()
	// The acknowledgements of the records sent after a record refused say
	// whether the subject now lacks it before them. After one that did
	// not come, the others will not either.
	var re *RecordError
	if errors.As(err, &re) && !errors.Is(err, ErrNoAck) {
		n, derr := p.drain(ctx)
		re.StoredAfter = n
		if derr != nil {
			re.Err = fmt.Errorf("%w; then, for a record after it: %w", re.Err, derr)
		}
	}
	return res, err
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// AppendHeaderBytes is at most what Append's headers add to a record
// whose Nats-Msg-Id is msgID: the size that the server's max_payload and
// a stream's max_msg_size limit is the record's plus this.
func AppendHeaderBytes(msgID string) int {
	return len("NATS/1.0\r\n") +
		len(jetstream.MsgIDHeader+": \r\n") + len(msgID) +
		len(jetstream.ExpectedLastSubjSeqHeader+": \r\n") + len(strconv.FormatUint(^uint64(0), 10)) +
		len("\r\n")
}
