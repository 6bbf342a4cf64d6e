package rebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// runStream starts a server with TRANSCRIPTS holding records of the
// sessions s0 to s3, and returns a connection and each session rebuilt
// record by record.
func runStream(t *testing.T) (*nats.Conn, map[string]*Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc := natstest.Connect(t, natstest.Start(t))
	js, err := bus.JetStream(nc)
	require.NoError(t, err)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = bus.EnsureStream(ctx, js, def)
	require.NoError(t, err)
	inputs := hostileRecords(t)
	want := map[string]*Session{}
	for i := range 80 {
		id := fmt.Sprintf("s%d", i%4)
		data := inputs[(i*7)%len(inputs)]
		if i%3 == 0 {
			data = fmt.Appendf(nil, `{"role":"user","content":"message %d"}`, i)
		}
		seq, err := bus.Publish(ctx, js, subject.TranscriptsPrefix+id, data, "")
		require.NoError(t, err)
		if want[id] == nil {
			want[id] = NewSession(projection.Options{}, store.DefaultLimits())
		}
		want[id].Add(seq, data)
	}
	return nc, want
}

// reply is the service's JSON reply for a rebuilt session.
func reply(t *testing.T, id string, s *Session) []byte {
	t.Helper()
	dropped, err := json.Marshal(s.Proj.Dropped())
	require.NoError(t, err)
	return fmt.Appendf(nil, `{"session":%q,"seq":%d,"messages":%s,"dropped":%s}`, id, s.Proj.Seq(), s.Proj.AppendJSON(nil), dropped)
}

// Every pass gives the checkpoints of a record-by-record rebuild: the
// whole stream, one session, the sessions touched since a sequence.
func TestRebuilder_Checkpoints(t *testing.T) {
	nc, want := runStream(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		cfg      Config
		sessions []string
	}{
		{"all", Config{}, []string{"s0", "s1", "s2", "s3"}},
		{"one session", Config{Session: "s2"}, []string{"s2"}},
		{"no records", Config{Session: "s9"}, nil}, // nothing written
		{"since", Config{From: 79}, []string{"s2", "s3"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Conn, cfg.Stream, cfg.Limits = nc, "TRANSCRIPTS", store.DefaultLimits()
			rb, err := Open(ctx, cfg)
			require.NoError(t, err)
			read, err := rb.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, len(tt.sessions), read.Sessions)
			n, err := rb.WriteCheckpoints(ctx)
			require.NoError(t, err)
			require.Equal(t, len(tt.sessions), n)
			st, err := bus.OpenStream(ctx, nc, "TRANSCRIPTS")
			require.NoError(t, err)
			bucket, err := st.OpenCheckpoints(ctx)
			require.NoError(t, err)
			for _, id := range tt.sessions {
				cp, ok, err := bucket.Get(ctx, id)
				require.NoError(t, err)
				require.True(t, ok, id)
				wantCP := store.Checkpoint{}
				if want[id] != nil {
					wantCP = want[id].Checkpoint()
				}
				require.Equal(t, wantCP, cp, id)
			}
			if tt.cfg.Session != "" && len(tt.sessions) == 0 {
				_, ok, err := bucket.Get(ctx, tt.cfg.Session)
				require.NoError(t, err)
				require.False(t, ok, "a checkpoint written for a session with no records")
			}
			_, err = rb.Check(ctx)
			require.Error(t, err, "checkpoints are not compared")
		})
	}
}

// Check lists the sessions whose context differs from the service's and
// those it could not compare, and compares every other one.
func TestRebuilder_Check(t *testing.T) {
	nc, want := runStream(t)
	ctx := context.Background()
	// The service: right about s0 and s3, wrong about s1, failing for s2.
	_, err := nc.Subscribe(subject.ContextPrefix+"*", func(m *nats.Msg) {
		id := strings.TrimPrefix(m.Subject, subject.ContextPrefix)
		switch id {
		case "s1":
			m.Respond(fmt.Appendf(nil, `{"session":"s1","seq":%d,"messages":[],"dropped":{}}`, want[id].Proj.Seq()))
		case "s2":
			r := nats.NewMsg(m.Reply)
			r.Header.Set(micro.ErrorCodeHeader, "500")
			r.Header.Set(micro.ErrorHeader, "internal error")
			m.RespondMsg(r)
		default:
			m.Respond(reply(t, id, want[id]))
		}
	})
	require.NoError(t, err)

	var p countingProgress
	rb, err := Open(ctx, Config{Conn: nc, Stream: "TRANSCRIPTS", Limits: store.DefaultLimits(), Check: true, Progress: &p, Workers: 2})
	require.NoError(t, err)
	read, err := rb.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, ReadStats{Sessions: 4, Records: 80, Took: read.Took}, read)
	require.Equal(t, []uint64{80, 80}, []uint64{p.total, p.done})
	_, err = rb.WriteCheckpoints(ctx)
	require.Error(t, err, "whole projections are not written")

	res, err := rb.Check(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, res.Sessions)
	require.Equal(t, []string{"s1"}, res.Differ)
	require.Len(t, res.Failed, 1)
	require.Equal(t, "s2", res.Failed[0].Session)
	var se *client.Error
	require.ErrorAs(t, res.Failed[0], &se)
	require.Equal(t, "500", se.Code)
}

type countingProgress struct{ total, done uint64 }

func (p *countingProgress) Start(total uint64, _ string) { p.total = total }
func (p *countingProgress) Update(done uint64)           {}
func (p *countingProgress) Finish(done uint64)           { p.done = done }
