package bus_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
)

// appendRecords are n records for Append on subject, with ids id-0...
func appendRecords(subject string, n int) bus.AppendRecords {
	return bus.AppendRecords{
		Subject: subject,
		N:       n,
		Data:    func(i int) ([]byte, error) { return fmt.Appendf(nil, `{"role":"user","content":"%d"}`, i), nil },
		MsgID:   func(i int) string { return fmt.Sprintf("id-%d", i) },
	}
}

// Append stores the records in order, more than a window of them, tells
// the progress as acknowledgements come, and counts what the server
// dropped as duplicates.
func TestAppend(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)

	r := appendRecords("transcripts.s1", 1200)
	acked := 0
	r.Progress = func(n int) {
		require.Equal(t, acked+1, n)
		acked = n
	}
	res, err := bus.Append(ctx, js, r)
	require.NoError(t, err)
	require.Equal(t, bus.Appended{Stored: 1200, Last: 1200}, res)
	require.Equal(t, 1200, acked)
	log, err := bus.ReadSubjectLog(ctx, js, st, "transcripts.s1")
	require.NoError(t, err)
	for i, id := range log.IDs {
		require.Equal(t, fmt.Sprintf("id-%d", i), id)
	}

	r.Progress = nil
	res, err = bus.Append(ctx, js, r)
	require.NoError(t, err)
	require.Equal(t, bus.Appended{Duplicate: 1200, Last: 1200}, res, "within the duplicate window")

	r.Data = func(i int) ([]byte, error) { return nil, errors.New("no bytes") }
	_, err = bus.Append(ctx, js, r)
	var re *bus.RecordError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 0, re.Index)
	require.EqualError(t, err, "record 1 not stored: no bytes")
}

// A stream that never acknowledges: Append fails after AckWait, naming
// the first record not acknowledged.
func TestAppend_NoAcknowledgement(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MUTE", Subjects: []string{"mute.>"}, NoAck: true})
	require.NoError(t, err)
	r := appendRecords("mute.s1", 3)
	r.AckWait = 200 * time.Millisecond
	start := time.Now()
	_, err = bus.Append(ctx, js, r)
	var re *bus.RecordError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 0, re.Index)
	require.ErrorContains(t, err, "no acknowledgement in 200ms")
	require.Less(t, time.Since(start), 5*time.Second)
}
