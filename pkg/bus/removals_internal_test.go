package bus

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A stream info reply that does not decode, or does not hold both
// figures, is an error, never a count: a check that took a missing
// figure for zero could verify a sequence a removal not applied precedes.
func TestDecodeRemoved_Hostile(t *testing.T) {
	cases := []struct {
		name          string
		data          string
		removed, last uint64
		err           error
	}{
		{"state", `{"config":{"name":"T"},"state":{"messages":7,"last_seq":10,"first_seq":4}}`, 3, 10, nil},
		{"nothing removed", `{"state":{"messages":10,"last_seq":10}}`, 0, 10, nil},
		{"empty stream", `{"state":{"messages":0,"last_seq":0}}`, 0, 0, nil},
		{"more messages than sequences", `{"state":{"messages":12,"last_seq":10}}`, 0, 10, nil},
		{"look-alikes in the config", `{"config":{"description":"\"state\":{\"messages\":0,\"last_seq\":0}","metadata":{"state":"{}"}},"state":{"messages":1,"last_seq":5}}`, 4, 5, nil},
		{"empty", ``, 0, 0, ErrBadStreamInfo},
		{"garbage", `{"state":{"messages":`, 0, 0, ErrBadStreamInfo},
		{"not an object", `[1,2]`, 0, 0, ErrBadStreamInfo},
		{"no state", `{"config":{"name":"T"}}`, 0, 0, ErrBadStreamInfo},
		{"state null", `{"state":null}`, 0, 0, ErrBadStreamInfo},
		{"no message count", `{"state":{"last_seq":10}}`, 0, 0, ErrBadStreamInfo},
		{"no last sequence", `{"state":{"messages":10}}`, 0, 0, ErrBadStreamInfo},
		{"typed wrong", `{"state":{"messages":"10","last_seq":10}}`, 0, 0, ErrBadStreamInfo},
		{"negative", `{"state":{"messages":-1,"last_seq":10}}`, 0, 0, ErrBadStreamInfo},
		{"answered by the leader", `{"state":{"messages":10,"last_seq":10},"cluster":{"name":"C","raft_group":"S-R3F-x","leader":"n1","replicas":[{"name":"n2"},{"name":"n3"}]}}`, 0, 10, nil},
		{"one server", `{"state":{"messages":10,"last_seq":10},"cluster":{"leader":"n1"}}`, 0, 10, nil},
		{"a replica while the stream has no leader", `{"state":{"messages":0,"last_seq":0},"cluster":{"name":"C","raft_group":"S-R3F-x","replicas":[{"name":"n1"},{"name":"n2"},{"name":"n3"}]}}`, 0, 0, ErrNoStreamLeader},
		{"stream not found", `{"error":{"code":404,"err_code":10059,"description":"stream not found"}}`, 0, 0, jetstream.ErrStreamNotFound},
		{"error beside a state", `{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"},"state":{"messages":1,"last_seq":1}}`, 0, 0, &jetstream.APIError{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			removed, last, err := decodeRemoved([]byte(c.data))
			switch want := c.err.(type) {
			case nil:
				require.NoError(t, err)
				require.Equal(t, c.removed, removed)
				require.Equal(t, c.last, last)
			case *jetstream.APIError:
				var got *jetstream.APIError
				require.ErrorAs(t, err, &got)
				require.Equal(t, 503, got.Code)
			default:
				require.ErrorIs(t, err, want)
			}
		})
	}
}

// StreamState's reply: the identity needs the stream's name and
// creation time, and the state as Removed needs it.
func TestDecodeStreamState_Hostile(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	identity, removed, err := decodeStreamState([]byte(`{"config":{"name":"T"},"created":"2026-01-02T03:04:05.000000006Z","state":{"messages":7,"last_seq":10}}`))
	require.NoError(t, err)
	require.Equal(t, "T@"+created.Format(time.RFC3339Nano), identity)
	require.Equal(t, uint64(3), removed)
	for name, data := range map[string]string{
		"no name":          `{"created":"2026-01-02T03:04:05Z","state":{"messages":7,"last_seq":10}}`,
		"empty name":       `{"config":{"name":""},"created":"2026-01-02T03:04:05Z","state":{"messages":7,"last_seq":10}}`,
		"no creation time": `{"config":{"name":"T"},"state":{"messages":7,"last_seq":10}}`,
		"bad time":         `{"config":{"name":"T"},"created":"yesterday","state":{"messages":7,"last_seq":10}}`,
		"no state":         `{"config":{"name":"T"},"created":"2026-01-02T03:04:05Z"}`,
	} {
		_, _, err := decodeStreamState([]byte(data))
		require.ErrorIs(t, err, ErrBadStreamInfo, name)
	}
}
