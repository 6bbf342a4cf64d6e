//go:build !slow

package integration

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/replytest"
	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// TestService_RenderedTurns plays a runtime's turns against a real ctxd:
// each turn publishes a session's next records, then fetches its context
// in a provider format with min_seq the last acknowledgement's sequence,
// as JSON or as msgpack. Every reply is a rendering from scratch of the
// session's records up to that sequence: the JSON reply byte for byte,
// the msgpack one field by field. With the default cache every session
// stays loaded, and renders each reply from the one before; with a cache
// of about one session, sessions, and the rendered replies kept with
// them, are evicted and loaded again between turns.
func TestService_RenderedTurns(t *testing.T) {
	for _, small := range []bool{false, true} {
		t.Run(map[bool]string{false: "kept", true: "evicted"}[small], func(t *testing.T) { testRenderedTurns(t, small) })
	}
}

func testRenderedTurns(t *testing.T, small bool) {
	a := startApp(t, t.TempDir(), func(cfg *app.Config) {
		if small {
			cfg.CacheBytes = 1 << 20
		}
	})
	c := newClient(t, a.URL())
	type session struct {
		id   string
		f    render.Format
		mp   bool
		g    *workload.Generator
		recs []projection.Record
	}
	var all []*session
	for i, f := range render.Formats[1:] {
		for k, mp := range []bool{false, true} {
			all = append(all, &session{id: fmt.Sprintf("r%d", 2*i+k), f: f, mp: mp,
				g: workload.New(uint64(10+2*i+k), workload.Default.WithScreenshots(40<<10, 8))})
		}
	}
	turns := 25
	if testing.Short() {
		turns = 8
	}
	for turn := range turns {
		for _, s := range all {
			var recs []any
			if turn == 0 {
				recs = s.g.Session(30)
			} else {
				recs = s.g.Next()
			}
			var last uint64
			for _, v := range recs {
				last = c.publishValue(s.id, v, false)
				s.recs = append(s.recs, projection.Record{Seq: last, Value: v})
			}
			req := record.NewMap("min_seq", int64(last), "wait_ms", int64(10000), "format", string(s.f))
			var body []byte
			var err error
			if s.mp {
				body, err = record.MarshalMsgpack(req)
			} else {
				body, err = record.MarshalJSON(req)
			}
			require.NoError(t, err)
			msg := c.request("ctxd.context."+s.id, body, nil)
			require.Empty(t, msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader))
			requireRendering(t, fmt.Sprintf("%s, turn %d, %s", s.id, turn, s.f), s.id, s.f, s.recs, msg.Data)
		}
	}
	st := a.Stats()
	t.Logf("%d evictions, %d loads; %d bytes held", st.Evictions, st.Loads, st.Bytes)
	if small {
		require.Positive(t, st.Evictions, "sessions are evicted between turns")
		// Eviction passes over a session in use at that moment (the
		// ingest applying its records), so the bound may be over by about
		// one session until the next eviction.
		require.LessOrEqual(t, st.Bytes, int64(2<<20))
	} else {
		require.Zero(t, st.Evictions)
	}
}

// requireRendering checks a rendered reply against a rendering from
// scratch of the records.
func requireRendering(t *testing.T, what, session string, f render.Format, recs []projection.Record, data []byte) {
	t.Helper()
	p := projection.New(projection.Options{})
	for _, r := range recs {
		p.Apply(r.Seq, r.Value)
	}
	if r, err := protocol.ReadReply(data); err == nil && r.Digest != "" {
		data, err = replytest.Plain(data)
		require.NoError(t, err, what)
	}
	msgs, seqs := p.Messages(), p.MessageSeqs(nil)
	body, rep := render.Render(f, msgs, render.Options{Seqs: seqs})
	n, err := body.JSONLen()
	require.NoError(t, err)
	fields := []record.Member{{Key: "session", Value: session}, {Key: "seq", Value: p.Seq()}, {Key: "format", Value: string(f)}}
	fields = append(fields, body.Fields.Members...)
	fields = append(fields,
		record.Member{Key: "dropped", Value: p.Dropped().Map()},
		record.Member{Key: "render", Value: rep.Map(f)},
		record.Member{Key: "usage", Value: render.Estimate(body, n).Map()})
	if record.IsJSON(data) {
		want := []byte{'{'}
		for i, m := range fields {
			if i > 0 {
				want = append(want, ',')
			}
			want = record.AppendJSONString(want, m.Key)
			want = append(want, ':')
			want, err = record.AppendJSON(want, m.Value)
			require.NoError(t, err)
		}
		want = append(want, '}')
		if string(want) != string(data) {
			t.Fatalf("%s: the reply is not a rendering from scratch\nwant: %.2000s\ngot:  %.2000s", what, want, data)
		}
		return
	}
	v, err := record.DecodeMsgpack(data)
	require.NoError(t, err, what)
	got := v.(*record.Map)
	require.Equal(t, len(fields), got.Len(), what)
	for i, m := range fields {
		require.Equal(t, m.Key, got.Members[i].Key, what)
		want, err := record.MarshalJSON(m.Value)
		require.NoError(t, err)
		have, err := record.MarshalJSON(got.Members[i].Value)
		require.NoError(t, err)
		if string(want) != string(have) {
			t.Fatalf("%s: the msgpack reply's %s is not a rendering from scratch\nwant: %.2000s\ngot:  %.2000s", what, m.Key, want, have)
		}
	}
	require.Equal(t, strconv.FormatUint(recs[len(recs)-1].Seq, 10), strconv.FormatUint(p.Seq(), 10), what)
}
