package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// AppendRecords are the records Append stores at the end of a subject.
type AppendRecords struct {
	Subject string
	N       int
	// Data returns the bytes of record i (from 0). It is called as the
	// record is sent, while the server stores the ones before.
	Data func(i int) ([]byte, error)
	// MsgID returns the Nats-Msg-Id of record i.
	MsgID func(i int) string
	// Progress, when not nil, is told how many records are acknowledged,
	// as they are.
	Progress func(acked int)
	// AckWait is how long a window of records waits for its
	// acknowledgements; 0 for the pipeline's 30 s.
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

// A RecordError is the failure of one record of Append.
type RecordError struct {
	Index int // the record's, from 0
	Err   error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record %d not stored: %v", e.Index+1, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// Append stores records on a subject, in order, pipelined (a window of
// records sent, then their acknowledgements awaited, at most AckWait). On
// a failure it stops and returns a *RecordError, with what it did until
// then.
func Append(ctx context.Context, js jetstream.JetStream, r AppendRecords) (Appended, error) {
	var res Appended
	p := newPipeline(js, func(i int, err error) error { return &RecordError{Index: i, Err: err} })
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
	for i := range r.N {
		data, err := r.Data(i)
		if err != nil {
			return res, &RecordError{Index: i, Err: err}
		}
		if err := p.publish(ctx, r.Subject, data, jetstream.WithMsgID(r.MsgID(i))); err != nil {
			return res, err
		}
	}
	return res, p.wait(ctx)
}
