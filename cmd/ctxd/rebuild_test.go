package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/rebuild"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// rebuildRecords are the payloads published, in turn, to the test's
// sessions: messages, compactions as JSON (one spelled with escapes) and
// msgpack, an invalid compaction and records that do not decode.
func rebuildRecords(t *testing.T) [][]byte {
	t.Helper()
	compaction := record.NewMap(
		"type", "compaction", "at", "2026-01-02T03:04:05.000Z", "baseSeq", int64(3),
		"plannerVersion", int64(1), "summaryModelRef", "m", "summary", "s",
		"qualityAudit", "passed", "messages", []any{record.NewMap("role", "user", "content", "hi")},
		"firstKeptIndex", int64(1), "tokensBefore", int64(10), "tokensAfter", int64(5))
	js, err := record.MarshalJSON(compaction)
	require.NoError(t, err)
	mp, err := record.MarshalMsgpack(compaction)
	require.NoError(t, err)
	invalid := compaction.Clone()
	invalid.Set("handover", nil)
	inv, err := record.MarshalJSON(invalid)
	require.NoError(t, err)
	return [][]byte{
		[]byte(`{"role":"user","content":"fix the login button"}`),
		js,
		[]byte(`{"role":"assistant","content":"the compaction ran"}`),
		[]byte(strings.Replace(string(js), `"compaction"`, `"\u0063ompaction"`, 1)),
		inv,
		[]byte(`{"role":"user",`),
		mp,
		[]byte(`{"role":"user","content":"again"}`),
	}
}

// ctxd rebuild writes the checkpoints a full rebuild of every session
// gives, whether it reads the whole stream, one session or the sessions
// touched since a sequence.
func TestRebuild_WritesCheckpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, url))
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = bus.EnsureStream(ctx, js, def)
	require.NoError(t, err)

	recs := rebuildRecords(t)
	want := map[string]*rebuild.Session{}
	since := func(from uint64) []string { // sessions with a record at or after from
		var ids []string
		for id, s := range want {
			if s.Proj.Seq() >= from {
				ids = append(ids, id)
			}
		}
		return ids
	}
	for i := range 61 {
		id := fmt.Sprintf("s%d", i%5)
		if i%7 == 3 {
			id = "s1" // sessions of different lengths
		}
		data := recs[(i*3)%len(recs)]
		ack, err := js.Publish(ctx, subject.TranscriptsPrefix+id, data)
		require.NoError(t, err)
		if want[id] == nil {
			want[id] = rebuild.NewSession(projection.Options{}, store.DefaultLimits())
		}
		want[id].Add(ack.Sequence, data)
	}
	bucket, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(t, err)
	check := func(args ...string) map[string]store.Checkpoint {
		t.Helper()
		for _, id := range []string{"s0", "s1", "s2", "s3", "s4", "s9"} {
			_ = bucket.Put(ctx, id, store.Checkpoint{}) // cleared, then rewritten
		}
		code, out, errOut := runCmd(t, "", append([]string{"rebuild", "--nats", url}, args...)...)
		require.Equal(t, 0, code, "stderr: %s", errOut)
		require.Contains(t, out, "wrote ")
		got, err := bucket.All(ctx)
		require.NoError(t, err)
		return got
	}
	wantCP := func(ids ...string) map[string]store.Checkpoint {
		out := map[string]store.Checkpoint{"s0": {}, "s1": {}, "s2": {}, "s3": {}, "s4": {}, "s9": {}}
		for _, id := range ids {
			out[id] = store.Checkpoint{}
			if s := want[id]; s != nil {
				out[id] = s.Checkpoint()
			}
		}
		return out
	}
	for id, s := range want {
		require.NotZero(t, s.From, "session %s has a valid compaction", id)
	}
	require.Equal(t, wantCP("s0", "s1", "s2", "s3", "s4"), check())
	require.Equal(t, wantCP("s2"), check("--session", "s2"))
	require.Equal(t, wantCP("s9"), check("--session", "s9")) // no records: a checkpoint from the start
	require.Len(t, since(59), 3)
	require.Equal(t, wantCP(since(59)...), check("--from", "59"))
	require.Equal(t, wantCP(since(50)...), check("--from", "50"))

	// The progress counts what the summary counts: sessions rebuilt in
	// full with --from, records read otherwise.
	code, _, errOut := runCmd(t, "", "replay", "--nats", url, "--from", "59")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "rebuild: 3/3 sessions")
	require.Contains(t, errOut, "rebuilt 3 sessions from ")
	code, _, errOut = runCmd(t, "", "replay", "--nats", url)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "rebuild: 61/61 records")
	require.Contains(t, errOut, "rebuilt 5 sessions from 61 records")
}
