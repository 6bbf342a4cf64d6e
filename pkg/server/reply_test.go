package server

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/replytest"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// sessionOf applies JSON records, one per sequence from 1 on, to a new
// projection; seqs overrides the sequences when given.
func sessionOf(t testing.TB, records []string, seqs ...uint64) *projection.Session {
	t.Helper()
	p := projection.New(projection.Options{})
	for i, r := range records {
		v, err := record.DecodeJSON([]byte(r))
		require.NoError(t, err, "record %d", i)
		seq := uint64(i + 1)
		if i < len(seqs) {
			seq = seqs[i]
		}
		require.True(t, p.Apply(seq, v))
	}
	return p
}

// decodedReply is a reply as a client reads it.
type decodedReply struct {
	session  string
	seq      string // the integer's decimal form
	messages []any
	dropped  *record.Map
}

// decodeReplyBody checks a reply's digest when it has one, decodes the
// reply without it and checks its shape: a map of exactly session, seq, messages and
// dropped, in that order.
func decodeReplyBody(t testing.TB, body []byte, asMsgpack bool) decodedReply {
	t.Helper()
	if r, err := protocol.ReadReply(body); err == nil && r.Digest != "" {
		body, err = replytest.Plain(body)
		require.NoError(t, err, "reply: %.300s", body)
	}
	var v any
	var err error
	if asMsgpack {
		v, err = record.DecodeMsgpack(body)
	} else {
		v, err = record.DecodeJSON(body)
	}
	require.NoError(t, err, "reply: %.300s", body)
	m, ok := v.(*record.Map)
	require.True(t, ok, "the reply is a map")
	var keys []string
	for _, mem := range m.Members {
		keys = append(keys, mem.Key)
	}
	require.Equal(t, []string{"session", "seq", "messages", "dropped"}, keys)

	var r decodedReply
	sv, _ := m.Get("session")
	r.session, ok = sv.(string)
	require.True(t, ok, "session is a string: %#v", sv)
	qv, _ := m.Get("seq")
	r.seq, ok = record.IntegerString(qv)
	require.True(t, ok, "seq is an integer: %#v", qv)
	mv, _ := m.Get("messages")
	r.messages, ok = mv.([]any)
	require.True(t, ok, "messages is an array, never null: %#v", mv)
	dv, _ := m.Get("dropped")
	r.dropped, ok = dv.(*record.Map)
	require.True(t, ok, "dropped is a map: %#v", dv)
	return r
}

// droppedOf is the dropped map a reply must carry for d.
func droppedOf(d projection.Dropped) *record.Map {
	calls := []any{}
	for _, c := range d.UnpairedCalls {
		calls = append(calls, record.NewMap("id", c.ID, "tool", c.Tool, "seq", int64(c.Seq)))
	}
	orphans := []any{}
	for _, o := range d.OrphanResults {
		orphans = append(orphans, record.NewMap("id", o.ID, "seq", int64(o.Seq)))
	}
	return record.NewMap("unpaired_calls", calls, "orphan_results", orphans, "images_omitted", int64(d.ImagesOmitted))
}

// requireEqualValues compares record values structurally.
func requireEqualValues(t testing.TB, want, got any, what string) {
	t.Helper()
	if record.Equal(want, got) {
		return
	}
	w, _ := record.MarshalJSON(want)
	g, _ := record.MarshalJSON(got)
	require.Fail(t, what+" differs", "want: %.2000s\n got: %.2000s", w, g)
}

func TestAppendReply(t *testing.T) {
	tests := []struct {
		name    string
		session string
		proj    func(t testing.TB) *projection.Session // nil: a session without records

		seq      string
		messages int
		unpaired int
		orphans  int
		images   int64
	}{
		{name: "no records", session: "s1", seq: "0"},
		{
			name: "one message", session: "demo",
			proj: func(t testing.TB) *projection.Session {
				return sessionOf(t, []string{`{"role":"user","content":"hello \"there\"\n","timestamp":1764493200000}`}, 15)
			},
			seq: "15", messages: 1,
		},
		{
			name: "records all dropped by the rules", session: "a-b_C",
			proj: func(t testing.TB) *projection.Session {
				return sessionOf(t, []string{`{"kind":"context"}`, `null`}, 3, 9)
			},
			seq: "9",
		},
		{
			name: "an unpaired call, an orphan result and a trimmed screenshot", session: "tools",
			proj: func(t testing.TB) *projection.Session {
				return sessionOf(t, []string{
					`{"role":"toolResult","toolCallId":"r0","content":"stale"}`,
					`{"role":"assistant","content":[{"type":"text","text":"working"},{"type":"tool_use","id":"c1","name":"edit","input":{}},{"type":"tool_use","id":"c2","name":"bash","input":{}}]}`,
					`{"role":"toolResult","toolCallId":"c1","content":"done"}`,
					`{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use","arguments":{}}]}`,
					`{"role":"toolResult","toolCallId":"b1","toolName":"browser_use","content":[{"type":"image","data":"s1","mimeType":"image/png"}]}`,
					`{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use","arguments":{}}]}`,
					`{"role":"toolResult","toolCallId":"b2","toolName":"browser_use","content":[{"type":"image","data":"s2","mimeType":"image/png"}]}`,
				})
			},
			seq: "7", messages: 6, unpaired: 1, orphans: 1, images: 1,
		},
		{
			name: "a sequence beyond int64", session: "big",
			proj: func(t testing.TB) *projection.Session {
				return sessionOf(t, []string{`{"role":"user","content":"x"}`}, 1<<63+5)
			},
			seq: fmt.Sprint(uint64(1<<63 + 5)), messages: 1,
		},
	}
	for _, tt := range tests {
		for _, asMsgpack := range []bool{false, true} {
			name := tt.name + "/json"
			if asMsgpack {
				name = tt.name + "/msgpack"
			}
			t.Run(name, func(t *testing.T) {
				var p *projection.Session
				if tt.proj != nil {
					p = tt.proj(t)
				}
				prefix := []byte("prefix")
				var out []byte
				if asMsgpack {
					var err error
					out, err = appendReplyMsgpack(prefix, tt.session, p)
					require.NoError(t, err)
					require.True(t, bytes.HasPrefix(out, prefix), "appends to dst")
					out = out[len(prefix):]
				} else {
					out = replyJSON(tt.session, p)
				}
				r := decodeReplyBody(t, out, asMsgpack)

				require.Equal(t, tt.session, r.session)
				require.Equal(t, tt.seq, r.seq)
				require.Len(t, r.messages, tt.messages)
				require.NotNil(t, r.messages)

				d := projection.Dropped{}
				if p != nil {
					requireEqualValues(t, p.Messages(), r.messages, "messages")
					d = p.Dropped()
				}
				require.Len(t, d.UnpairedCalls, tt.unpaired)
				require.Len(t, d.OrphanResults, tt.orphans)
				require.Equal(t, tt.images, int64(d.ImagesOmitted))
				requireEqualValues(t, droppedOf(d), r.dropped, "dropped")
			})
		}
	}
}

func TestReplyJSON_NoRecords(t *testing.T) {
	got := string(replyJSON("s1", nil))
	require.Equal(t, `{"session":"s1","seq":0,"messages":[],"dropped":{"unpaired_calls":[],"orphan_results":[],"images_omitted":0}}`, got)
}

// A context holding a number msgpack cannot carry has no msgpack reply:
// the error maps to a 500 that tells the client to ask for JSON, and the
// JSON reply still carries the number exactly.
func TestAppendReplyMsgpack_NoMsgpackForm(t *testing.T) {
	p := sessionOf(t, []string{
		`{"role":"user","content":"ok"}`,
		`{"role":"user","content":"far","n":1E400}`,
	})
	prefix := []byte("prefix")
	out, err := appendReplyMsgpack(prefix, "s1", p)
	require.ErrorIs(t, err, errNotMsgpack)
	require.ErrorIs(t, err, record.ErrUnsupported)
	require.Equal(t, prefix, out, "dst is returned unchanged")
	code, desc := errorReply(err)
	require.Equal(t, CodeInternal, code)
	require.Contains(t, desc, "request JSON")
	require.NotContains(t, desc, "seq 2", "no internal detail")

	r := decodeReplyBody(t, replyJSON("s1", p), false)
	require.Len(t, r.messages, 2)
	n, _ := r.messages[1].(*record.Map).Get("n")
	require.Equal(t, record.Number("1E400"), n)
}

// replyJSON is the reply of protocol 3.4 ("digest": false).
func replyJSON(session string, p *projection.Session) []byte {
	return appendReplyJSON(nil, session, p)
}

// The whole JSON reply with its digest is built once per view and seq:
// asked again, the session answers with the same bytes; a skipped record
// moves seq, not the view, and the reply says the new seq.
func TestReplyJSON_Kept(t *testing.T) {
	s := &Service{}
	s.digests.max = DefaultDigestBytes
	req := contextRequest{format: render.Neutral, digest: true}
	p := sessionOf(t, []string{`{"role":"user","content":"x"}`})
	first, err := s.digestedNeutral(nil, "s1", p, req)
	require.NoError(t, err)
	again, err := s.digestedNeutral(nil, "s1", p, req)
	require.NoError(t, err)
	require.Equal(t, &first[0], &again[0], "the same bytes")
	plain, err := replytest.Plain(first)
	require.NoError(t, err)
	require.Equal(t, string(replyJSON("s1", p)), string(plain))
	require.True(t, p.Skip(2))
	moved, err := s.digestedNeutral(nil, "s1", p, req)
	require.NoError(t, err)
	require.Equal(t, "2", decodeReplyBody(t, moved, false).seq)
	require.Equal(t, "1", decodeReplyBody(t, first, false).seq, "what was handed out stays")
}
