package projection

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/require"
)

func decodeAll(t *testing.T, records ...string) []any {
	t.Helper()
	out := make([]any, len(records))
	for i, r := range records {
		m, err := record.Decoder{}.Decode([]byte(r))
		require.NoError(t, err, r)
		out[i] = m
	}
	return out
}

// requireBuild checks the session against Build over the same records, in
// every rendering.
func requireBuild(t *testing.T, s *Session, values []any) {
	t.Helper()
	want := Build(Numbered(values), Options{})
	wantJSON, err := record.AppendJSON(nil, want.Messages)
	require.NoError(t, err)
	require.Equal(t, string(wantJSON), string(s.AppendJSON(nil)))
	wantMP, err := record.AppendMsgpack(nil, want.Messages)
	require.NoError(t, err)
	require.Equal(t, wantMP, s.AppendMsgpack(nil))
	require.True(t, record.Equal(want.Messages, s.Messages()))
	require.Equal(t, want.Dropped, s.Dropped())
}

// TestSession_Pack: once rendered to JSON, settled entries are held only
// as their JSON bytes; an entry that may still render differently keeps
// its message; a packed screenshot that is trimmed later renders from its
// bytes and lets go of the image.
func TestSession_Pack(t *testing.T) {
	shot := strings.Repeat("A", 4096)
	values := decodeAll(t,
		`{"role":"user","content":"open the page"}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"b1","name":"browser_use","arguments":{}}]}`,
		`{"role":"toolResult","toolCallId":"b1","content":[{"type":"image","data":"`+shot+`","mimeType":"image/png"}]}`,
		`{"role":"assistant","content":[{"type":"toolCall","id":"b2","name":"browser_use","arguments":{}}]}`,
	)
	s := New(Options{})
	for i, v := range values {
		s.Apply(uint64(i+1), v)
	}
	s.JSONBody()
	packed := func() []bool {
		var p []bool
		for _, e := range s.entries {
			p = append(p, e.packed)
			if e.packed {
				require.Nil(t, e.msg)
				require.Nil(t, e.out)
			}
		}
		return p
	}
	require.Equal(t, []bool{true, true, true, false}, packed(), "the call b2 is not answered yet")
	requireBuild(t, s, values)

	// b2's screenshot trims b1's: the packed result is decoded back and
	// rendered again.
	values = append(values, decodeAll(t,
		`{"role":"toolResult","toolCallId":"b2","content":[{"type":"text","text":"page 2"},{"type":"image","data":"`+shot+`","mimeType":"image/png"}]}`)...)
	s.Apply(5, values[4])
	requireBuild(t, s, values)
	require.Equal(t, []bool{true, true, true, true, true}, packed())
	body, _ := s.JSONBody()
	require.Equal(t, 1, strings.Count(string(body), shot), "only the latest screenshot is held")
	require.Equal(t, 1, s.Dropped().ImagesOmitted)
}

// TestSession_Pack_KeepsWhatJSONWouldChange: a message holding a whole
// float64 (from msgpack) is not packed, since JSON would read it back as
// an integer; one whose rendering dropped a block is not packed either.
func TestSession_Pack_KeepsWhatJSONWouldChange(t *testing.T) {
	values := []any{
		record.NewMap("role", "user", "content", "x", "n", float64(3)),
		record.NewMap("role", "user", "content", "x", "n", float64(2.5)),
	}
	values = append(values, decodeAll(t,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"orphan","content":"?"},{"type":"text","text":"hi"}]}`)...)
	s := New(Options{})
	for i, v := range values {
		s.Apply(uint64(i+1), v)
	}
	s.JSONBody()
	require.False(t, s.entries[0].packed, "a whole float64")
	require.True(t, s.entries[1].packed)
	require.False(t, s.entries[2].packed, "a dropped block")
	requireBuild(t, s, values)
}

// TestSession_TrimPackedKeepsNoCacheBytes: a packed entry trimmed is
// decoded sharing the JSON cache's bytes; whether or not shed replaces
// its message, what the entry keeps points into no cache bytes, which a
// rebuild for Apply writes over in place.
func TestSession_TrimPackedKeepsNoCacheBytes(t *testing.T) {
	long := strings.Repeat("x", 2*record.ShareMinString)
	values := decodeAll(t,
		`{"role":"user","content":"`+long+`"}`,
		`{"role":"assistant","content":"done"}`,
	)
	s := New(Options{})
	for i, v := range values {
		s.Apply(uint64(i+1), v)
	}
	s.JSONBody()
	require.True(t, s.entries[0].packed)
	s.trim(0) // nothing to trim: the message must be a copy
	e := s.entries[0]
	require.NotNil(t, e.msg)
	text, _ := e.msg.Get("content")
	str := text.(string)
	c := s.json.bytes[:cap(s.json.bytes)]
	p, lo, hi := uintptr(unsafe.Pointer(unsafe.StringData(str))), uintptr(unsafe.Pointer(&c[0])), uintptr(unsafe.Pointer(&c[0]))+uintptr(len(c))
	require.False(t, p >= lo && p < hi, "the trimmed message points into the JSON cache")
	requireBuild(t, s, values)
}
