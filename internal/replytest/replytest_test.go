package replytest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
)

// Plain gives back the reply without its digest, in JSON and in msgpack,
// and refuses a reply without one or with one that is not its messages'.
func TestPlain(t *testing.T) {
	const plain = `{"session":"s","seq":2,"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"dropped":{}}`
	withDigest := func(d string) []byte { return []byte(strings.TrimSuffix(plain, "}") + `,"digest":"` + d + `"}`) }
	good, err := protocol.ComputeDigest([]byte(plain))
	require.NoError(t, err)

	_, err = Plain([]byte(plain))
	require.ErrorContains(t, err, "no digest")
	_, err = Plain(withDigest(strings.Repeat("0", 64)))
	require.ErrorContains(t, err, "but its messages' is "+good)
	got, err := Plain(withDigest(good))
	require.NoError(t, err)
	require.Equal(t, plain, string(got))

	msgpackOf := func(b []byte) []byte {
		v, err := record.DecodeJSON(b)
		require.NoError(t, err)
		mp, err := record.MarshalMsgpack(v)
		require.NoError(t, err)
		return mp
	}
	// In msgpack the digest is of the messages as msgpack encodes them.
	mpGood, err := protocol.ComputeDigest(msgpackOf([]byte(plain)))
	require.NoError(t, err)
	require.NotEqual(t, good, mpGood)
	_, err = Plain(msgpackOf(withDigest(good)))
	require.ErrorContains(t, err, "but its messages' is "+mpGood)
	got, err = Plain(msgpackOf(withDigest(mpGood)))
	require.NoError(t, err)
	require.Equal(t, msgpackOf([]byte(plain)), got)
}
