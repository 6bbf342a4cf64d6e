package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/pkg/subject"
)

// AuditAdvisory is the subject on which the server announces every
// JetStream API request it answered in the account (an API audit
// advisory): its subject, its body and the response. A purge or a
// message deletion of the transcripts stream is told there, after it is
// done. The advisory is plain NATS: a connection that is down misses it.
const AuditAdvisory = "$JS.EVENT.ADVISORY.API"

// Removal is records removed from a stream by a purge or a deletion of
// a message, as an API audit advisory tells it.
type Removal struct {
	// Session is the one session whose records were removed, when the
	// purge named it by its filter ("" otherwise).
	Session string
	// Seq is the sequence of the message deleted, for a deletion whose
	// request the advisory carries (0 otherwise).
	Seq uint64
	// All says the records of any session may be gone: a purge without
	// a filter or with one naming more than a session, or a removal the
	// advisory does not say more of (in a cluster the server leaves the
	// request out of a purge's advisory).
	All bool
	// Count is how many messages were removed.
	Count uint64
}

// ErrBadAdvisory is wrapped by ParseRemoval's error for an advisory
// about the stream that does not decode.
var ErrBadAdvisory = errors.New("bus: API audit advisory does not decode")

type apiAudit struct {
	Subject  string `json:"subject"`
	Request  string `json:"request"`
	Response string `json:"response"`
}

type removalResponse struct {
	Success bool            `json:"success"`
	Purged  uint64          `json:"purged"`
	Error   json.RawMessage `json:"error"`
}

type removalRequest struct {
	Filter string `json:"filter"`
	Seq    uint64 `json:"seq"`
}

// ParseRemoval reads an API audit advisory. ok is true for a purge or a
// message deletion of the stream that removed messages; any other
// request, a failed one or one that removed nothing, is not a removal.
func ParseRemoval(data []byte, stream string) (r Removal, ok bool, err error) {
	purgeAPI, deleteAPI := "API.STREAM.PURGE."+stream, "API.STREAM.MSG.DELETE."+stream
	// Most advisories are of other requests: found without decoding.
	if !bytes.Contains(data, []byte(purgeAPI)) && !bytes.Contains(data, []byte(deleteAPI)) {
		return r, false, nil
	}
	var adv apiAudit
	if err := json.Unmarshal(data, &adv); err != nil {
		return r, false, fmt.Errorf("%w: %w", ErrBadAdvisory, err)
	}
	purge := adv.Subject == "$JS."+purgeAPI || strings.HasSuffix(adv.Subject, "."+purgeAPI)
	del := adv.Subject == "$JS."+deleteAPI || strings.HasSuffix(adv.Subject, "."+deleteAPI)
	if !purge && !del {
		return r, false, nil
	}
	var resp removalResponse
	if err := json.Unmarshal([]byte(adv.Response), &resp); err != nil {
		return r, false, fmt.Errorf("%w: response of %s: %w", ErrBadAdvisory, adv.Subject, err)
	}
	if !resp.Success || len(resp.Error) > 0 && string(resp.Error) != "null" {
		return r, false, nil
	}
	var req removalRequest
	known := adv.Request != ""
	if known {
		if err := json.Unmarshal([]byte(adv.Request), &req); err != nil {
			// The server answered it: something was removed, what is not
			// known.
			known = false
		}
	}
	switch {
	case purge:
		if resp.Purged == 0 {
			return r, false, nil
		}
		r.Count = resp.Purged
		if !known || req.Filter == "" {
			r.All = true
		} else if id, err := subject.SessionOfTranscript(req.Filter); err == nil {
			r.Session = id
		} else {
			r.All = true // a wildcard, or a subject of no session
		}
	default:
		r.Count = 1
		if known && req.Seq > 0 {
			r.Seq = req.Seq
		} else {
			r.All = true
		}
	}
	return r, true, nil
}

// Removed returns how many of the stream's sequences up to its last hold
// no message (purged, deleted, or gone past a limit), and its last
// sequence. It only grows: it moves when, and only when, messages leave
// the stream.
//
// It asks the stream's leader ($JS.API.STREAM.INFO.<stream>) and decodes
// only the two figures it needs from the reply, not the configuration
// and cluster of a whole jetstream.StreamInfo: an instance reads the
// stream's state about once a delivery while it keeps up.
func Removed(ctx context.Context, nc *nats.Conn, stream string) (removed, last uint64, err error) {
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+stream, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("stream info: %w", err)
	}
	return decodeRemoved(m.Data)
}

// StreamState returns the stream's identity as it is now (its name and
// creation time, as StreamIdentity says them: a stream deleted and made
// again has another) and its count of removed sequences (Removed), from
// one request to its leader.
func StreamState(ctx context.Context, nc *nats.Conn, stream string) (identity string, removed uint64, err error) {
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+stream, nil)
	if err != nil {
		return "", 0, fmt.Errorf("stream info: %w", err)
	}
	return decodeStreamState(m.Data)
}

// streamState is what Removed and StreamState read of a stream info
// reply.
type streamState struct {
	Error  *jetstream.APIError `json:"error"`
	Config *struct {
		Name string `json:"name"`
	} `json:"config"`
	Created *time.Time `json:"created"`
	State   *struct {
		Msgs    *uint64 `json:"messages"`
		LastSeq *uint64 `json:"last_seq"`
	} `json:"state"`
	Cluster *jetstream.ClusterInfo `json:"cluster"`
}

// parseStreamState reads a stream info reply that holds the stream's
// state: a reply without both figures is an error, never a count of
// zero.
func parseStreamState(data []byte) (*streamState, error) {
	var resp streamState
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("stream info: %w: %w", ErrBadStreamInfo, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
			return nil, fmt.Errorf("stream info: %w", jetstream.ErrStreamNotFound)
		}
		return nil, fmt.Errorf("stream info: %w", resp.Error)
	}
	if resp.State == nil || resp.State.Msgs == nil || resp.State.LastSeq == nil {
		return nil, fmt.Errorf("stream info: %w: no state", ErrBadStreamInfo)
	}
	if err := fromLeader(&jetstream.StreamInfo{Cluster: resp.Cluster}); err != nil {
		return nil, fmt.Errorf("stream info: %w", err)
	}
	return &resp, nil
}

// removed returns the count of removed sequences and the last sequence.
func (s *streamState) removed() (removed, last uint64) {
	msgs, last := *s.State.Msgs, *s.State.LastSeq
	return last - min(msgs, last), last
}

// decodeRemoved reads a stream info reply for Removed.
func decodeRemoved(data []byte) (removed, last uint64, err error) {
	resp, err := parseStreamState(data)
	if err != nil {
		return 0, 0, err
	}
	removed, last = resp.removed()
	return removed, last, nil
}

// decodeStreamState reads a stream info reply for StreamState: one
// without the stream's name or creation time is an error.
func decodeStreamState(data []byte) (identity string, removed uint64, err error) {
	resp, err := parseStreamState(data)
	if err != nil {
		return "", 0, err
	}
	if resp.Config == nil || resp.Config.Name == "" || resp.Created == nil {
		return "", 0, fmt.Errorf("stream info: %w: no name or creation time", ErrBadStreamInfo)
	}
	removed, _ = resp.removed()
	return identityOf(resp.Config.Name, *resp.Created), removed, nil
}

// ErrBadStreamInfo is wrapped by Removed's error for a reply that does
// not decode, or holds no stream state.
var ErrBadStreamInfo = errors.New("bus: stream info reply does not decode")
