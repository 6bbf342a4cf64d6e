package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// directBatch is how many messages one batched direct get asks for.
const directBatch = 256

// ReadSubject calls fn for every message stored on subject with a stream
// sequence from from to to (inclusive), in order, with batched direct gets
// ($JS.API.DIRECT.GET, which needs allow_direct on the stream): a few
// round trips however many sessions share the stream, and no consumer.
func ReadSubject(ctx context.Context, nc *nats.Conn, stream, subject string, from, to uint64, fn func(seq uint64, data []byte) error) error {
	if from == 0 {
		from = 1
	}
	if to < from {
		return nil
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("read %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	api := "$JS.API.DIRECT.GET." + stream
	next := from
	for next <= to {
		req, _ := json.Marshal(struct {
			Seq     uint64 `json:"seq"`
			NextFor string `json:"next_by_subj"`
			Batch   int    `json:"batch"`
		}{next, subject, directBatch})
		if err := nc.PublishRequest(api, inbox, req); err != nil {
			return fmt.Errorf("read %s: %w", subject, err)
		}
		got, past := 0, false
		for {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				return fmt.Errorf("read %s from %d: %w", subject, next, err)
			}
			switch m.Header.Get("Status") {
			case "404": // nothing more on the subject
				return nil
			case "204": // end of batch
				if pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64); pending == 0 || got == 0 || past {
					return nil
				}
			case "":
				seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
				if err != nil {
					return fmt.Errorf("read %s: direct get reply without a sequence", subject)
				}
				got++
				if seq > to {
					past = true
					continue // past the end: drain the batch
				}
				if err := fn(seq, m.Data); err != nil {
					return err
				}
				next = seq + 1
				continue
			default:
				return fmt.Errorf("read %s: direct get: %s %s", subject, m.Header.Get("Status"), m.Header.Get("Description"))
			}
			break
		}
		if next > to {
			return nil
		}
	}
	return nil
}

// ReadSeqs calls fn for the messages at the given stream sequences, in
// the order given, with direct gets pipelined a window at a time: each is
// a lookup by sequence, however the stream's subjects interleave.
// A sequence with no message (deleted) is skipped.
func ReadSeqs(ctx context.Context, nc *nats.Conn, stream string, seqs []uint64, fn func(seq uint64, data []byte) error) error {
	const window = 128
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	defer sub.Unsubscribe()
	api := "$JS.API.DIRECT.GET." + stream
	for start := 0; start < len(seqs); start += window {
		part := seqs[start:min(start+window, len(seqs))]
		for _, seq := range part {
			if err := nc.PublishRequest(api, inbox, []byte(`{"seq":`+strconv.FormatUint(seq, 10)+`}`)); err != nil {
				return fmt.Errorf("read seq %d: %w", seq, err)
			}
		}
		got := make(map[uint64][]byte, len(part))
		for range part {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			switch m.Header.Get("Status") {
			case "404":
				continue // deleted meanwhile
			case "":
			default:
				return fmt.Errorf("read: direct get: %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
			}
			seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
			if err != nil {
				return fmt.Errorf("read: direct get reply without a sequence")
			}
			got[seq] = m.Data
		}
		for _, seq := range part {
			if data, ok := got[seq]; ok {
				if err := fn(seq, data); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ReadRange calls fn for every message of the stream with a sequence from
// from to to (inclusive), whatever its subject, in order, with batched
// direct gets. Deleted sequences are skipped.
func ReadRange(ctx context.Context, nc *nats.Conn, stream string, from, to uint64, fn func(m Msg) error) error {
	if from == 0 {
		from = 1
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("read %d-%d: %w", from, to, err)
	}
	defer sub.Unsubscribe()
	api := "$JS.API.DIRECT.GET." + stream
	next := from
	for next <= to {
		n := min(to-next+1, directBatch)
		req := []byte(`{"seq":` + strconv.FormatUint(next, 10) + `,"batch":` + strconv.FormatUint(n, 10) + `}`)
		if err := nc.PublishRequest(api, inbox, req); err != nil {
			return fmt.Errorf("read %d-%d: %w", from, to, err)
		}
		got := 0
	batch:
		for {
			m, err := sub.NextMsgWithContext(ctx)
			if err != nil {
				return fmt.Errorf("read %d-%d: %w", from, to, err)
			}
			switch m.Header.Get("Status") {
			case "404":
				return nil // nothing at or after next
			case "204":
				break batch
			case "":
				seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
				if err != nil {
					return fmt.Errorf("read %d-%d: direct get reply without a sequence", from, to)
				}
				got++
				if seq > to {
					continue
				}
				if err := fn(Msg{Subject: m.Header.Get("Nats-Subject"), Seq: seq, Data: m.Data}); err != nil {
					return err
				}
				next = seq + 1
			default:
				return fmt.Errorf("read %d-%d: direct get: %s %s", from, to, m.Header.Get("Status"), m.Header.Get("Description"))
			}
		}
		if got == 0 {
			return nil
		}
		if next <= to && got < int(n) {
			// The batch ended early: the rest was deleted, or lies past the
			// stream's end.
			return nil
		}
	}
	return nil
}
