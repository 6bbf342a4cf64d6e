package projection

import (
	"fmt"
	"math/rand/v2"
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

// TestSession_Fit: a session fitted after a load is settled whole, its
// JSON rendering holds no room, and it goes on as any other; one whose
// bytes were handed out is left as it is.
func TestSession_Fit(t *testing.T) {
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 3))
		g := newGen(r)
		opt := Options{BrowserTools: g.BrowserTools()}
		s := New(opt)
		values := g.Session(20 + r.IntN(60))
		n := len(values) / 2
		var recs []Record
		for i, v := range values[:n] {
			s.Apply(uint64(i+1), v)
			recs = append(recs, Record{Seq: uint64(i + 1), Value: v})
		}
		s.Fit()
		require.Equal(t, len(s.json.bytes), cap(s.json.bytes), "seed %d: room left", seed)
		require.Equal(t, s.version, s.json.built, "seed %d: the JSON rendering is not up to date", seed)
		require.Equal(t, s.msgBytes, s.settled, "seed %d", seed)
		want := Build(recs, opt)
		wantJSON, err := record.AppendJSON(nil, want.Messages)
		require.NoError(t, err)
		require.Equal(t, string(wantJSON), string(s.AppendJSON(nil)), "seed %d: after Fit", seed)

		// Handed out: Fit leaves the bytes where they are.
		body, _ := s.JSONBody()
		held := string(body)
		s.Fit()
		got, _ := s.JSONBody()
		require.Same(t, &body[:1][0], &got[:1][0], "seed %d: handed-out bytes moved", seed)

		for i, v := range values[n:] {
			s.Apply(uint64(n+i+1), v)
			recs = append(recs, Record{Seq: uint64(n + i + 1), Value: v})
		}
		require.Equal(t, held, string(body), "seed %d: handed-out bytes written", seed)
		want = Build(recs, opt)
		wantJSON, err = record.AppendJSON(nil, want.Messages)
		require.NoError(t, err)
		require.Equal(t, string(wantJSON), string(s.AppendJSON(nil)), "seed %d: after more records", seed)
	}
}
