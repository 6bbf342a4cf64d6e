package subject

import (
	"errors"
	"strings"
	"testing"

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
