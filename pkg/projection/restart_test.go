package projection

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/require"
)

// TestSession_RestartKeepsRoom: a compaction empties the JSON rendering
// into a buffer with the room the rendering had, the same buffer when
// nobody holds its bytes, so that the session grows back without copying
// itself at every step; the room is kept only until the next compaction
// shows it unused.
func TestSession_RestartKeepsRoom(t *testing.T) {
	msg := func(i int) any {
		m, err := record.Decode(fmt.Appendf(nil, `{"role":"user","content":"%s %d"}`, strings.Repeat("x", 400), i))
		require.NoError(t, err)
		return m
	}
	compaction := func() any {
		m, err := record.Decode([]byte(checkpoint(`[{"role":"user","content":"summary"}]`)))
		require.NoError(t, err)
		return m
	}
	type session struct {
		*Session
		values []any
		seq    uint64
	}
	apply := func(s *session, v any) {
		s.seq++
		s.values = append(s.values, v)
		require.True(t, s.Apply(s.seq, v))
	}
	grow := func(s *session, n int) {
		for i := range n {
			apply(s, msg(i))
		}
	}

	// first is where the JSON rendering's buffer starts.
	first := func(s *session) *byte {
		require.NotZero(t, cap(s.json.bytes), "no JSON rendering")
		return &s.json.bytes[:1][0]
	}

	// Never read: the compaction empties the buffer in place.
	s := &session{Session: New(Options{})}
	grow(s, 500)
	s.settle()
	grown, before := len(s.json.bytes), first(s)
	require.Greater(t, grown, 200_000)
	apply(s, compaction())
	apply(s, msg(0))
	s.settle()
	require.Same(t, before, first(s), "the buffer nobody held was not reused")
	grow(s, 500)
	require.Same(t, before, first(s), "the session grew back into another buffer")
	requireBuild(t, s.Session, s.values[len(s.values)-502:])

	// Read before the compaction: the bytes handed out stay as they were,
	// and the new buffer has the room.
	held := string(s.AppendJSON(nil))
	body, _ := s.JSONBody()
	grown = len(s.json.bytes)
	apply(s, compaction())
	apply(s, msg(0))
	s.JSONBody()
	require.NotSame(t, &body[:1][0], first(s), "bytes handed out were reused")
	require.GreaterOrEqual(t, cap(s.json.bytes), grown, "room after a compaction")
	require.Equal(t, held, "["+string(body)+"]", "bytes handed out were written")
	requireBuild(t, s.Session, s.values[len(s.values)-2:])

	// A session that stays small after a compaction gives the room back
	// at the next.
	for range 2 {
		apply(s, compaction())
		grow(s, 40)
	}
	require.Less(t, cap(s.json.bytes), 100_000, "room kept for a session that no longer needs it")
	requireBuild(t, s.Session, s.values[len(s.values)-41:])
}
