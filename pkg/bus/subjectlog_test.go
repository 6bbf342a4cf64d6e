package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

// ReadSubjectLog gives the ids of one subject's messages in stream order,
// its last sequence and the stream's largest message; StreamFor finds the
// stream of a subject.
func TestReadSubjectLog(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	ensureTranscripts(t, js)
	st, err := bus.StreamFor(ctx, js, "transcripts.>")
	require.NoError(t, err)
	_, err = bus.StreamFor(ctx, js, "elsewhere.>")
	require.ErrorContains(t, err, "no stream stores elsewhere.>")

	log, err := bus.ReadSubjectLog(ctx, js, st, "transcripts.a")
	require.NoError(t, err)
	require.Equal(t, &bus.SubjectLog{Stream: "TRANSCRIPTS", MaxMsgSize: 8 << 20}, log)

	var want []string
	var last uint64
	for i := range 2500 {
		id := fmt.Sprintf("id-%d", i)
		if i%7 == 3 {
			id = "" // published without one
		}
		want = append(want, id)
		seq, err := bus.Publish(ctx, js, "transcripts.a", []byte(`{"role":"user","content":"x"}`), id)
		require.NoError(t, err)
		last = seq
		_, err = bus.Publish(ctx, js, "transcripts.b", []byte(`{"role":"user","content":"y"}`), fmt.Sprintf("b-%d", i))
		require.NoError(t, err)
	}
	log, err = bus.ReadSubjectLog(ctx, js, st, "transcripts.a")
	require.NoError(t, err)
	require.Equal(t, want, log.IDs)
	require.Equal(t, last, log.Last)
}

// On an R3 stream, through a server that need not lead it: each fetch of
// the ordered consumer makes a consumer, which the server the connection
// uses may not know yet when the fetch reaches it ("no responders", about
// one read in a hundred). A read never fails for that.
func TestReadSubjectLog_Cluster(t *testing.T) {
	reads := 300
	if testing.Short() {
		reads = 60
	}
	c := natstest.StartCluster(t, 3)
	js, err := jetstream.New(natstest.Connect(t, c.Nodes[0].URL))
	require.NoError(t, err)
	cfg := transcripts(t)
	cfg.Replicas = 3
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := bus.EnsureStream(ctx, js, cfg)
	require.NoError(t, err)
	c.WaitStreamLeader(t, cfg.Name)
	r := appendRecords("transcripts.x", 1500)
	_, err = bus.Append(ctx, js, r)
	require.NoError(t, err)
	for range reads {
		log, err := bus.ReadSubjectLog(ctx, js, st, "transcripts.x")
		require.NoError(t, err)
		require.Len(t, log.IDs, 1500)
	}
}
