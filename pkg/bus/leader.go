package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoStreamLeader is returned for a stream info of a replicated stream
// that a replica answered while the stream's group had no leader.
//
// Only the leader of a replicated stream answers $JS.API.STREAM.INFO,
// except while the group has no leader (an election, a lost quorum): a
// member then answers from its own state, which may be behind the
// records and removals the stream has acknowledged. Such a reply names
// no leader. A count read from it is not the stream's: a subject it
// holds no message of may hold many, and a removal made before the
// request may not be in it. So it is refused, and the caller asks again.
var ErrNoStreamLeader = errors.New("bus: stream info answered by a replica while the stream had no leader (its state may be behind)")

// fromLeader checks that a stream info was answered by the stream's
// leader: a stream on one server, or a replicated one whose reply names
// its leader.
func fromLeader(info *jetstream.StreamInfo) error {
	if c := info.Cluster; c != nil && c.RaftGroup != "" && c.Leader == "" {
		return ErrNoStreamLeader
	}
	return nil
}

// leaderInfo asks for the stream's info until its leader answers it
// (fromLeader), or ctx ends: an election ends in moments.
func leaderInfo(ctx context.Context, st jetstream.Stream, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	wait := 10 * time.Millisecond
	for {
		info, err := st.Info(ctx, opts...)
		if err != nil {
			return nil, err
		}
		if err = fromLeader(info); err == nil {
			return info, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}
