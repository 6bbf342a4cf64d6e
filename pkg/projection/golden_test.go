package projection

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/spectest"
	"github.com/ctxd/ctxd/pkg/record"
)

// loadFixtures returns the spec fixtures by file.
func loadFixtures(t testing.TB) map[string][]spectest.Case {
	t.Helper()
	out := map[string][]spectest.Case{}
	for _, c := range spectest.Cases(t) {
		out[c.File] = append(out[c.File], c)
	}
	return out
}

// requireMessages compares contexts structurally.
var requireMessages = spectest.RequireMessages

func TestBuild_Fixtures(t *testing.T) {
	for file, cases := range loadFixtures(t) {
		for _, c := range cases {
			t.Run(file+"/"+c.Name, func(t *testing.T) {
				got := Build(Numbered(c.Records), Options{})
				require.NotNil(t, got.Messages)
				requireMessages(t, c.Expect, got.Messages)
			})
		}
	}
}

func TestSession_Fixtures(t *testing.T) {
	for file, cases := range loadFixtures(t) {
		for _, c := range cases {
			t.Run(file+"/"+c.Name, func(t *testing.T) {
				s := New(Options{})
				for i, r := range c.Records {
					s.Apply(uint64(i+1), r)
					want := Build(Numbered(c.Records[:i+1]), Options{})
					requireSameResult(t, want, s)
				}
				requireMessages(t, c.Expect, s.Messages())
			})
		}
	}
}

// requireSameResult checks every rendering of a session against Build.
func requireSameResult(t testing.TB, want Result, s *Session) {
	t.Helper()
	requireMessages(t, want.Messages, s.Messages())
	require.Equal(t, want.Dropped, s.Dropped())
	wantJSON, err := record.MarshalJSON(want.Messages)
	require.NoError(t, err)
	require.Equal(t, string(wantJSON), string(s.AppendJSON(nil)))
	wantMP, err := record.MarshalMsgpack(want.Messages)
	require.NoError(t, err)
	require.Equal(t, wantMP, s.AppendMsgpack(nil))
}
