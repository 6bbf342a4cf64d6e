package projection

import (
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/require"
)

// TestSession_MsgpackBody_NoMsgpackForm: a JSON number beyond float64 has no msgpack
// form, so the context has none either. The session says so rather than
// hand out a partial array that would read as another context, and
// recovers once a checkpoint drops the message.
func TestSession_MsgpackBody_NoMsgpackForm(t *testing.T) {
	decode := func(s string) any {
		v, err := record.DecodeJSON([]byte(s))
		require.NoError(t, err)
		return v
	}
	s := New(Options{})
	s.Apply(1, decode(`{"role":"user","content":"a","usage":{"cost":1E400}}`))
	s.Apply(2, decode(`{"role":"user","content":"b"}`))

	body, n, err := s.MsgpackBody()
	require.ErrorIs(t, err, record.ErrUnsupported)
	require.ErrorContains(t, err, "seq 1")
	require.Equal(t, 1, n, "the body holds the messages that encode")
	want, err := record.MarshalMsgpack([]any{decode(`{"role":"user","content":"b"}`)})
	require.NoError(t, err)
	require.Equal(t, want, append(record.AppendMsgpackArrayLen(nil, n), body...))
	require.Equal(t, []byte("x"), s.AppendMsgpack([]byte("x")), "nothing is appended")
	require.Equal(t, `[{"role":"user","content":"a","usage":{"cost":1E400}},{"role":"user","content":"b"}]`,
		string(s.AppendJSON(nil)), "JSON carries the number")

	s.Apply(3, decode(`{"type":"compaction","at":"2025-11-30T10:00:00Z","baseSeq":2,"plannerVersion":1,
		"summaryModelRef":"m","summary":"s","qualityAudit":"passed","firstKeptIndex":1,"tokensBefore":10,"tokensAfter":5,
		"messages":[{"role":"user","content":"b"}]}`))
	_, n, err = s.MsgpackBody()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, want, s.AppendMsgpack(nil))
}
