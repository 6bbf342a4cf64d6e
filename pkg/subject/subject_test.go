package subject

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestCheckSession(t *testing.T) {
	good := []string{"s1", "A", "a-b_C-9", strings.Repeat("x", 128)}
	for _, id := range good {
		require.NoError(t, CheckSession(id), id)
	}
	bad := []string{"", "a.b", "*", ">", "a b", "a*b", "ä", "a\x00", strings.Repeat("x", 129), "a\n", "s1.>"}
	for _, id := range bad {
		err := CheckSession(id)
		require.Error(t, err, "%q", id)
		require.True(t, errors.Is(err, ErrBadSession))
	}
}

func TestSubjects(t *testing.T) {
	s, err := Transcript("s1")
	require.NoError(t, err)
	require.Equal(t, "transcripts.s1", s)
	s, err = Context("s1")
	require.NoError(t, err)
	require.Equal(t, "ctxd.context.s1", s)
	_, err = Context("a.b")
	require.ErrorIs(t, err, ErrBadSession)

	id, err := SessionOf("transcripts.abc", TranscriptsPrefix)
	require.NoError(t, err)
	require.Equal(t, "abc", id)
	for _, subj := range []string{"transcripts.a.b", "transcripts.", "other.a", "transcripts.a b"} {
		_, err := SessionOf(subj, TranscriptsPrefix)
		require.ErrorIs(t, err, ErrBadSession, subj)
	}
}

// A subject filter that names more than one session's records (a
// wildcard) names no session.
func TestSessionOfTranscript(t *testing.T) {
	id, err := SessionOfTranscript("transcripts.s1")
	require.NoError(t, err)
	require.Equal(t, "s1", id)
	for _, subj := range []string{"transcripts.>", "transcripts.*", "transcripts.s1.>", ">", "", "transcripts."} {
		_, err := SessionOfTranscript(subj)
		require.ErrorIs(t, err, ErrBadSession, subj)
	}
}

func TestPartition(t *testing.T) {
	require.Equal(t, 0, Partition("s1", 1))
	require.Equal(t, 0, Partition("s1", 0))
	// fnv32a("s1") % 8 = 1, as the stream's transform stores it
	// (pkg/bus checks the function against the server for many ids).
	require.Equal(t, 1, Partition("s1", 8))
	require.Equal(t, "transcripts.s1", Stored("s1", 1))
	require.Equal(t, "transcripts.1.s1", Stored("s1", 8))
	subj, err := PartitionContext("s1", 8)
	require.NoError(t, err)
	require.Equal(t, "ctxd.p.1.s1", subj)
	_, err = PartitionContext("a.b", 8)
	require.ErrorIs(t, err, ErrBadSession)
}

func TestSessionOfStored(t *testing.T) {
	for subj, want := range map[string]struct {
		s string
		k int
	}{"transcripts.s1": {"s1", -1}, "transcripts.3.s1": {"s1", 3}, "transcripts.0.a-b": {"a-b", 0}} {
		s, k, err := SessionOfStored(subj)
		require.NoError(t, err, subj)
		require.Equal(t, want.s, s, subj)
		require.Equal(t, want.k, k, subj)
	}
	for _, subj := range []string{"transcripts.", "transcripts.x.s1", "transcripts.03.s1", "transcripts.-1.s1", "transcripts.1.a.b", "other.s1", "transcripts.1.", "transcripts.99999999999999999999.s"} {
		_, _, err := SessionOfStored(subj)
		require.ErrorIs(t, err, ErrBadSession, subj)
	}
}

// A session id error names the character at fault, whole, and its
// position counted in characters; bytes that are not UTF-8 are named
// as bytes, escaped, never printed as the characters they would be in
// another encoding.
func TestCheckSession_Errors(t *testing.T) {
	tests := []struct{ id, want string }{
		{"", "invalid session id: empty"},
		{"a.b", `invalid session id: "a.b" has '.' at character 2; use only A-Z a-z 0-9 _ -`},
		{"séance", `invalid session id: "séance" has 'é' (U+00E9) at character 2; use only A-Z a-z 0-9 _ -`},
		{"transcripts.séance", `invalid session id: "transcripts.séance" has '.' at character 12; use only A-Z a-z 0-9 _ -`},
		{"日本語", `invalid session id: "日本語" has '日' (U+65E5) at character 1; use only A-Z a-z 0-9 _ -`},
		{"ab😀", `invalid session id: "ab😀" has '😀' (U+1F600) at character 3; use only A-Z a-z 0-9 _ -`},
		{"a\u200bb", `invalid session id: "a\u200bb" has '\u200b' (U+200B) at character 2; use only A-Z a-z 0-9 _ -`},
		{"a\nb", `invalid session id: "a\nb" has '\n' at character 2; use only A-Z a-z 0-9 _ -`},
		{"ab\xffc", `invalid session id: "ab\xffc" is not valid UTF-8: byte 0xff at character 3`},
		{"s\xc3", `invalid session id: "s\xc3" is not valid UTF-8: byte 0xc3 at character 2`},
		{strings.Repeat("x", 129), "invalid session id: 129 characters, at most 128"},
		{strings.Repeat("é", 129), `has 'é' (U+00E9) at character 1`},
		{strings.Repeat("x", 128) + "é", "invalid session id: 129 characters, at most 128"},
		// The id quoted is cut after 40 characters, never inside one.
		{strings.Repeat("é", 39) + "ab.", `"` + strings.Repeat("é", 39) + `a..." has 'é' (U+00E9) at character 1`},
		{"x-" + strings.Repeat("é", 50), `"x-` + strings.Repeat("é", 38) + `..." has 'é' (U+00E9) at character 3`},
	}
	for _, tt := range tests {
		err := CheckSession(tt.id)
		require.ErrorIs(t, err, ErrBadSession, "%q", tt.id)
		require.Contains(t, err.Error(), tt.want, "%q", tt.id)
		require.True(t, utf8.ValidString(err.Error()), "%q", err.Error())
	}
}

// A subject's session is checked the same way: the stored subject of a
// record published with a bad id names its character.
func TestSessionOfStored_Errors(t *testing.T) {
	_, _, err := SessionOfStored("transcripts.séance")
	require.ErrorIs(t, err, ErrBadSession)
	require.Contains(t, err.Error(), `"séance" has 'é' (U+00E9) at character 2`)
	_, _, err = SessionOfStored("other." + strings.Repeat("é", 60))
	require.ErrorIs(t, err, ErrBadSession)
	require.True(t, utf8.ValidString(err.Error()), "%q", err.Error())
}

// Whatever the id, the error is valid UTF-8, and an id is accepted
// exactly when it is 1 to 128 of the allowed bytes.
func FuzzCheckSession(f *testing.F) {
	for _, id := range []string{"s1", "séance", "a.b", "ab\xffc", "", strings.Repeat("é", 129)} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := CheckSession(id)
		ok := len(id) >= 1 && len(id) <= MaxSessionLen
		for i := 0; i < len(id); i++ {
			ok = ok && allowed(id[i])
		}
		if ok {
			require.NoError(t, err)
			return
		}
		require.ErrorIs(t, err, ErrBadSession)
		require.True(t, utf8.ValidString(err.Error()), "%q", err.Error())
	})
}
