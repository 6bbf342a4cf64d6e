package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Validated reads. A replica proves what it holds by what it sends: a
// message at sequence N (it stores the stream in order, so it holds
// every sequence up to N), or the Nats-UpTo-Sequence of a multi_last
// direct get (its last stream sequence). A 404, or an end of batch with
// nothing pending, proves nothing about the stream: only about the
// replica that sent it. A read that must reach a message it knows exists
// and stops short of it asks again: another request may land on another
// replica, and a follower catches up within milliseconds. After
// readRetries it asks the stream leader ($JS.API.STREAM.MSG.GET, which
// only the leader answers, with everything it acknowledged), one message
// per request, slow but authoritative: a message the leader does not have
// is gone (deleted, purged).

// readRetries is how many times a read asks the replicas again before it
// asks the stream leader.
const readRetries = 3

// retryDelays are the pauses before each retry: none before the first
// (the next request likely lands on another replica), then a lagging
// follower is given time to catch up.
var retryDelays = [readRetries]time.Duration{0, 2 * time.Millisecond, 10 * time.Millisecond}

// ReadStats counts what the reads of the stream (ReadSubject, ReadRange,
// ReadSeqs, LastOf) met in this process since it started. Retried and
// Leader above 0 are expected on a replicated stream under load; a read
// that stayed unproven failed with an error, it is not counted as done.
type ReadStats struct {
	// Reads is the number of reads.
	Reads uint64
	// Stale is the number of replies that stopped short of a message the
	// read knew existed: from a replica behind the stream leader, or
	// about messages deleted meanwhile.
	Stale uint64
	// Retried is the number of reads that asked the replicas again after
	// a stale reply.
	Retried uint64
	// Leader is the number of reads that asked the stream leader: after
	// their retries, to confirm that a message is gone, or to find the end
	// of a read to the end of a subject.
	Leader uint64
	// Lost is the number of times a read asked again after a reply did
	// not come within DirectTimeout (a server that stopped with the
	// request in flight).
	Lost uint64
}

var readStats struct{ reads, stale, retried, leader, lost atomic.Uint64 }

// Reads returns the counts of this process's reads so far.
func Reads() ReadStats {
	return ReadStats{
		Reads:   readStats.reads.Load(),
		Stale:   readStats.stale.Load(),
		Retried: readStats.retried.Load(),
		Leader:  readStats.leader.Load(),
		Lost:    readStats.lost.Load(),
	}
}

// stale counts n replies that stopped short.
func (d *directGet) stale(n int) { readStats.stale.Add(uint64(n)) }

// retry waits before retry number try (from 0).
func (d *directGet) retry(ctx context.Context, try int) error {
	if !d.retried {
		d.retried = true
		readStats.retried.Add(1)
	}
	if retryDelays[try] == 0 {
		return ctx.Err()
	}
	t := time.NewTimer(retryDelays[try])
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// leaderRead reads on from next with the stream leader, one message per
// request, the next one on subject (">" for any), and hands on those up
// to to, until one at or past target, or the leader has nothing more.
func (d *directGet) leaderRead(ctx context.Context, subject string, next, to, target uint64, fn func(directReply) error) error {
	for next <= to {
		m, err := d.leaderGet(ctx, getRequest{Seq: next, NextFor: subject})
		if err != nil {
			return err
		}
		if m == nil || m.Seq > to {
			return nil
		}
		if m.Seq < next {
			return fmt.Errorf("stream %s: stream leader: message %d out of order from %d", d.stream, m.Seq, next)
		}
		if err := fn(directReply{kind: message, seq: m.Seq, subject: m.Subject, data: m.Data}); err != nil {
			return err
		}
		if m.Seq >= target {
			return nil
		}
		next = m.Seq + 1
	}
	return nil
}

// apiError is the error of a JetStream API reply.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

// errNoMessage is the err_code of "no message found" (JSNoMessageFoundErr).
const errNoMessage = 10037

// leaderGet asks the stream leader for one message; nil when it has none
// matching req.
func (d *directGet) leaderGet(ctx context.Context, req getRequest) (*Msg, error) {
	var resp struct {
		Error   *apiError `json:"error"`
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Data    []byte `json:"data"`
		} `json:"message"`
	}
	if err := d.leaderRequest(ctx, "STREAM.MSG.GET", req, &resp); err != nil {
		return nil, err
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == errNoMessage:
		return nil, nil
	case resp.Error != nil:
		return nil, fmt.Errorf("stream %s: stream leader: %d %s", d.stream, resp.Error.Code, resp.Error.Description)
	case resp.Message == nil:
		return nil, fmt.Errorf("stream %s: stream leader: a reply without a message", d.stream)
	}
	return &Msg{Subject: resp.Message.Subject, Seq: resp.Message.Seq, Data: resp.Message.Data}, nil
}

// leaderLastSeq asks the stream leader for the stream's last sequence.
func (d *directGet) leaderLastSeq(ctx context.Context) (uint64, error) {
	var resp struct {
		Error *apiError `json:"error"`
		State struct {
			LastSeq uint64 `json:"last_seq"`
		} `json:"state"`
	}
	if err := d.leaderRequest(ctx, "STREAM.INFO", nil, &resp); err != nil {
		return 0, err
	}
	if resp.Error != nil {
		return 0, fmt.Errorf("stream %s: stream leader: %d %s", d.stream, resp.Error.Code, resp.Error.Description)
	}
	return resp.State.LastSeq, nil
}

// leaderRequest sends a JetStream API request about the stream, which its
// leader answers, and decodes the reply into resp.
func (d *directGet) leaderRequest(ctx context.Context, api string, req, resp any) error {
	if !d.askedLeader {
		d.askedLeader = true
		readStats.leader.Add(1)
	}
	var body []byte
	if req != nil {
		body, _ = json.Marshal(req)
	}
	rctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	m, err := d.nc.RequestWithContext(rctx, "$JS.API."+api+"."+d.stream, body)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("%w in %v", ErrNoReply, d.timeout)
	}
	if err != nil {
		return fmt.Errorf("stream %s: stream leader: %w", d.stream, err)
	}
	if err := json.Unmarshal(m.Data, resp); err != nil {
		return fmt.Errorf("stream %s: stream leader: reply: %w", d.stream, err)
	}
	return nil
}
