package bus

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
)

// fakeStream answers the direct gets of stream FAKE with answer, which
// returns the replies to send for a request, in order.
func fakeStream(t *testing.T, answer func(req getRequest) []*nats.Msg) *nats.Conn {
	t.Helper()
	url := coreServer(t)
	server := natstest.Connect(t, url)
	_, err := server.Subscribe("$JS.API.DIRECT.GET.FAKE", func(m *nats.Msg) {
		var req getRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("request %q: %v", m.Data, err)
			return
		}
		for _, r := range answer(req) {
			r.Subject = m.Reply
			if err := server.PublishMsg(r); err != nil {
				t.Errorf("reply: %v", err)
			}
		}
	})
	require.NoError(t, err)
	require.NoError(t, server.Flush())
	return natstest.Connect(t, url)
}

func storedMsg(seq uint64) *nats.Msg {
	m := nats.NewMsg("")
	m.Header.Set("Nats-Subject", "fake.s")
	m.Header.Set("Nats-Sequence", strconv.FormatUint(seq, 10))
	m.Data = []byte(strconv.FormatUint(seq, 10))
	return m
}

func statusMsg(status string, pending ...uint64) *nats.Msg {
	m := nats.NewMsg("")
	m.Header.Set("Status", status)
	if len(pending) > 0 {
		m.Header.Set("Nats-Num-Pending", strconv.FormatUint(pending[0], 10))
	}
	return m
}

// readAll reads FAKE's sequences from to to with a short reply timeout.
func readAll(t *testing.T, nc *nats.Conn, from, to uint64) ([]uint64, error) {
	t.Helper()
	d, err := openDirectGet(nc, "FAKE", 200*time.Millisecond)
	require.NoError(t, err)
	defer d.close()
	var seqs []uint64
	_, _, err = d.readBatches(context.Background(), "", from, to, func(r directReply) error {
		seqs = append(seqs, r.seq)
		return nil
	})
	return seqs, err
}

// A batch is followed by the next as long as the server says messages are
// pending, whatever the batch held; the end is where it says none are, a
// 404, or a message past the range.
func TestDirectGet_Batches(t *testing.T) {
	const last = 10 // the fake stream holds 1 to 10, and sends at most 3 per batch
	var mu sync.Mutex
	var asked []getRequest
	requests := func() []getRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}
	nc := fakeStream(t, func(req getRequest) []*nats.Msg {
		mu.Lock()
		asked = append(asked, req)
		mu.Unlock()
		if req.Seq > last {
			return []*nats.Msg{statusMsg("404")}
		}
		var out []*nats.Msg
		seq := req.Seq
		for ; seq <= last && len(out) < min(req.Batch, 3); seq++ {
			out = append(out, storedMsg(seq))
		}
		return append(out, statusMsg("204", last-seq+1))
	})

	seqs, err := readAll(t, nc, 1, 100)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, seqs)
	require.Len(t, requests(), 4, "batches of 3, 3, 3 and 1, the last with nothing pending")
	require.Equal(t, min(PullBytes(nc), directMaxBytes), requests()[0].MaxBytes, "what fits the server's max_pending")

	seqs, err = readAll(t, nc, 4, 8)
	require.NoError(t, err)
	require.Equal(t, []uint64{4, 5, 6, 7, 8}, seqs)
	require.Equal(t, 5, requests()[4].Batch, "no more than the range holds")

	seqs, err = readAll(t, nc, 11, 20)
	require.NoError(t, err)
	require.Empty(t, seqs, "a 404: nothing there")
}

// A lost reply, or one that does not say where the batch ended, fails the
// read; so does an error status.
func TestDirectGet_Fails(t *testing.T) {
	tests := []struct {
		name    string
		replies []*nats.Msg
		err     string
	}{
		{"no reply", nil, "no reply"},
		{"no end of batch", []*nats.Msg{storedMsg(1), storedMsg(2)}, "no reply"},
		{"end of batch without pending", []*nats.Msg{storedMsg(1), statusMsg("204")}, "without Nats-Num-Pending"},
		{"empty batch with messages pending", []*nats.Msg{statusMsg("204", 3)}, "empty batch"},
		{"bad request", []*nats.Msg{statusMsg("408")}, "status 408"},
		{"message without sequence", []*nats.Msg{nats.NewMsg("")}, "without Nats-Sequence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc := fakeStream(t, func(getRequest) []*nats.Msg {
				out := make([]*nats.Msg, len(tt.replies))
				for i, r := range tt.replies { // each request gets its own copies
					out[i] = &nats.Msg{Header: r.Header, Data: r.Data}
				}
				return out
			})
			_, err := readAll(t, nc, 1, 5)
			require.ErrorContains(t, err, tt.err)
			require.ErrorContains(t, err, "stream FAKE: direct get from ")
			if tt.err == "no reply" {
				require.ErrorIs(t, err, ErrNoReply)
			}
		})
	}
}
