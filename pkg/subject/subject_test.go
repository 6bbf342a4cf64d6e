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
