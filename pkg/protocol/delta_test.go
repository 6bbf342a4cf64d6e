package protocol

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// jsonReply and msgpackReply make a whole reply of the messages, with
// its digest.
func jsonReply(t *testing.T, msgs ...string) []byte {
	t.Helper()
	b := []byte(`{"session":"s","seq":4,"format":"anthropic","system":"be brief","messages":[` + strings.Join(msgs, ",") + `],"usage":{"bytes":1}`)
	r, err := ReadReply(append(b, '}'))
	require.NoError(t, err)
	d := r.Chain(append(b, '}'), len(r.Items)).Digest([]byte(`"be brief"`))
	return append(b, `,"digest":"`+d+`"}`...)
}

func TestApplyDelta(t *testing.T) {
	held := jsonReply(t, `{"a":1}`, `{"b":[2,"]"]}`, `{"c":3}`)
	full := jsonReply(t, `{"a":1}`, `{"b":[2,"]"]}`, `{"c":4}`, `{"d":5}`)
	f, err := ReadReply(full)
	require.NoError(t, err)
	delta := `{"session":"s","seq":4,"format":"anthropic","system":"be brief","messages":[{"c":4},{"d":5}],"usage":{"bytes":1},"digest":"` + f.Digest + `","delta":{"keep":2}}`
	got, err := ApplyDelta(held, []byte(delta))
	require.NoError(t, err)
	require.Equal(t, string(full), string(got))

	for _, bad := range []string{
		strings.Replace(delta, f.Digest, strings.Repeat("0", 64), 1), // the digest differs
		strings.Replace(delta, `"keep":2`, `"keep":9`, 1),            // more than held
		strings.Replace(delta, `"keep":2`, `"keep":-1`, 1),
		strings.Replace(delta, `"keep":2`, `"keep":"2"`, 1),
		`{"delta":{"keep":1}}`,
		`{"messages":[1,2],"messages":[3]}`,
		`{"messages":[1,2]`,
		`[1]`,
		"",
	} {
		_, err := ApplyDelta(held, []byte(bad))
		require.ErrorIs(t, err, ErrBadReply, bad)
	}
}

// Whatever the bytes, ReadReply and ApplyDelta return an error or a
// reply, never panic; a reply without delta applies to itself.
func FuzzApplyDelta(f *testing.F) {
	f.Add([]byte(`{"messages":[{"a":1},2],"delta":{"keep":1},"digest":"x"}`))
	f.Add([]byte("\x83\xa8messages\x92\x01\x02\xa5delta\x81\xa4keep\x01\xa3seq\x05"))
	f.Add([]byte(`{"contents":[],"systemInstruction":{"parts":[]}}`))
	heldJSON := []byte(`{"messages":[{"a":1},{"b":2}]}`)
	heldMsgpack := []byte("\x81\xa8messages\x92\x01\x02")
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Locate(b)
		held := heldJSON
		if len(b) > 0 && b[0] != '{' {
			held = heldMsgpack
		}
		out, err := ApplyDelta(held, b)
		if err != nil {
			require.ErrorIs(t, err, ErrBadReply)
			return
		}
		_, err = ReadReply(out)
		require.NoError(t, err, "%q from %q", out, b)
		h, err := Hold(held)
		require.NoError(t, err)
		next, err := h.Apply(b)
		if err == nil {
			require.Equal(t, out, next.Body)
		}
	})
}
