package bus_test

import (
	"bytes"
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

	// The first record must follow the subject's last message.
	r.Progress = nil
	_, err = bus.Append(ctx, js, r)
	require.ErrorIs(t, err, bus.ErrSubjectMoved)
	var re *bus.RecordError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 0, re.Index)
	require.Zero(t, re.StoredAfter)

	r.After = log.Last
	res, err = bus.Append(ctx, js, r)
	require.NoError(t, err)
	require.Equal(t, bus.Appended{Duplicate: 1200, Last: 1200}, res, "within the duplicate window")

	r.Data = func(i int) ([]byte, error) { return nil, errors.New("no bytes") }
	_, err = bus.Append(ctx, js, r)
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

// A record the server refuses in the middle (a stream's max_bytes with
// discard new, reached by a large record while the short ones after it
// fit): Append stops there, and says how many records after it the
// server stored all the same, in order.
func TestAppend_StopsAtARefusal(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	big := bytes.Repeat([]byte("x"), 20000)
	r := appendRecords("a.s1", 60)
	short := r.Data
	r.Data = func(i int) ([]byte, error) {
		if i == 30 {
			return fmt.Appendf(nil, `{"role":"user","content":"%s"}`, big), nil
		}
		return short(i)
	}

	// What the 30 records before the large one take in a stream.
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "A", Subjects: []string{"a.>"}})
	require.NoError(t, err)
	first := r
	first.N = 30
	_, err = bus.Append(ctx, js, first)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "A")
	require.NoError(t, err)
	before := st.CachedInfo().State.Bytes
	require.NoError(t, js.DeleteStream(ctx, "A"))

	cfg := jetstream.StreamConfig{Name: "A", Subjects: []string{"a.>"}, MaxBytes: int64(before) + 10000, Discard: jetstream.DiscardNew}
	st, err = js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	res, err := bus.Append(ctx, js, r)
	var re *bus.RecordError
	require.ErrorAs(t, err, &re)
	require.Equal(t, 30, re.Index)
	require.Equal(t, 29, re.StoredAfter)
	require.ErrorContains(t, err, "record 31 not stored: nats: API error: code=503 err_code=10077 description=maximum bytes exceeded (29 records after it stored)")
	require.Equal(t, 30, res.Stored)
	log, err := bus.ReadSubjectLog(ctx, js, st, "a.s1")
	require.NoError(t, err)
	require.Len(t, log.IDs, 59)
	for i, id := range log.IDs {
		if i >= 30 {
			i++
		}
		require.Equal(t, r.MsgID(i), id)
	}
}

// appendUnderTraffic appends n records to transcripts.imported while
// another connection publishes to other sessions of the stream, and
// checks that the session holds them all, in order.
func appendUnderTraffic(t *testing.T, js, other jetstream.JetStream, n int) {
	ctx := testContext(t)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := bus.Publish(ctx, other, fmt.Sprintf("transcripts.live%d", i%4), []byte(`{"role":"user","content":"live"}`), ""); err != nil {
				done <- err
				return
			}
		}
	}()
	res, err := bus.Append(ctx, js, appendRecords("transcripts.imported", n))
	close(stop)
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.Equal(t, n, res.Stored)
	st, err := js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	log, err := bus.ReadSubjectLog(ctx, js, st, "transcripts.imported")
	require.NoError(t, err)
	require.Len(t, log.IDs, n)
	for i, id := range log.IDs {
		require.Equal(t, fmt.Sprintf("id-%d", i), id)
	}
	require.Equal(t, log.Last, res.Last)
}

// Another publisher's messages on other subjects, between the records:
// the session holds every record once, in order.
func TestAppend_UnderTraffic(t *testing.T) {
	url := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	other, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	ensureTranscripts(t, js)
	appendUnderTraffic(t, js, other, 5000)
}

// The same on an R3 stream (whose leader checks the first record's
// expected subject sequence before proposing it), the other publisher
// connected to another server.
func TestAppend_UnderTrafficCluster(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	js, err := jetstream.New(natstest.Connect(t, c.Nodes[0].URL))
	require.NoError(t, err)
	other, err := jetstream.New(natstest.Connect(t, c.Nodes[1].URL))
	require.NoError(t, err)
	ensureR3Transcripts(t, c, js)
	appendUnderTraffic(t, js, other, 3000)
}

// Records of 7 MiB, more together than the window's bytes: they go a few
// at a time, and all are stored in order.
func TestAppend_LargeRecords(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	big := bytes.Repeat([]byte("x"), 7<<20)
	r := appendRecords("transcripts.big", 12)
	r.Data = func(i int) ([]byte, error) { return fmt.Appendf(nil, `{"role":"user","content":"%d%s"}`, i, big), nil }
	res, err := bus.Append(ctx, js, r)
	require.NoError(t, err)
	require.Equal(t, 12, res.Stored)
	log, err := bus.ReadSubjectLog(ctx, js, st, "transcripts.big")
	require.NoError(t, err)
	for i, id := range log.IDs {
		require.Equal(t, r.MsgID(i), id)
	}
	require.Len(t, log.IDs, 12)
}
