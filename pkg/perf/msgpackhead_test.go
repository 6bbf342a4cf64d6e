package perf

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

// reply encodes a context reply of the service's shape.
func msgpackReply(t testing.TB, seq uint64, messages []any) []byte {
	t.Helper()
	m := record.NewMap("session", "s", "seq", seq, "messages", messages,
		"dropped", record.NewMap("unpaired_calls", []any{}, "images_omitted", int64(3)))
	b, err := record.MarshalMsgpack(m)
	require.NoError(t, err)
	return b
}

func TestReplyHead(t *testing.T) {
	msgs := []any{
		record.NewMap("role", "user", "content", "hi", "n", int64(-5), "f", 1.5, "ok", true, "none", nil),
		record.NewMap("role", "assistant", "content", []any{record.NewMap("type", "text", "text", string(make([]byte, 70000)))}),
	}
	b := msgpackReply(t, 1<<40, msgs)
	seq, n, err := replyHead(b)
	require.NoError(t, err)
	require.Equal(t, uint64(1<<40), seq)
	require.Equal(t, 2, n)

	t.Run("malformed", func(t *testing.T) {
		for name, in := range map[string][]byte{
			"empty":          nil,
			"not a map":      {0x93, 1, 2, 3},
			"cut short":      b[:len(b)/2],
			"every prefix":   b[:7],
			"no messages":    msgpackNoMessages(t),
			"unknown type":   {0x81, 0xa3, 's', 'e', 'q', 0xc1},
			"huge string":    {0x81, 0xdb, 0xff, 0xff, 0xff, 0xff},
			"huge array":     {0x81, 0xa8, 'm', 'e', 's', 's', 'a', 'g', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff},
			"negative seq":   {0x82, 0xa3, 's', 'e', 'q', 0xff, 0xa8, 'm', 'e', 's', 's', 'a', 'g', 'e', 's', 0x90},
			"string seq":     {0x82, 0xa3, 's', 'e', 'q', 0xa1, '1', 0xa8, 'm', 'e', 's', 's', 'a', 'g', 'e', 's', 0x90},
			"non-string key": {0x81, 0x01, 0x02},
			"nested deep":    append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 20_000)...),
		} {
			_, _, err := replyHead(in)
			require.Error(t, err, name)
		}
		for i := range b {
			_, _, err := replyHead(b[:i])
			require.Error(t, err, "prefix of %d bytes", i)
		}
	})
}

func msgpackNoMessages(t *testing.T) []byte {
	b, err := record.MarshalMsgpack(record.NewMap("session", "s", "seq", int64(3)))
	require.NoError(t, err)
	return b
}

// FuzzReplyHead: replyHead never panics, and on a reply the encoder
// wrote it reads what the decoder reads.
func FuzzReplyHead(f *testing.F) {
	f.Add(msgpackReply(f, 7, []any{record.NewMap("role", "user", "content", "x")}))
	f.Add(msgpackReply(f, 0, []any{}))
	f.Add([]byte{0x81, 0xdb, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, n, err := replyHead(b)
		if err != nil {
			return
		}
		v, derr := record.DecodeMsgpack(b)
		if derr != nil {
			return // the decoder's limits (depth, duplicate keys) are its own
		}
		m, ok := v.(*record.Map)
		require.True(t, ok)
		msgs, _ := m.Get("messages")
		require.Len(t, msgs, n)
		s, _ := m.Get("seq")
		require.True(t, record.Equal(s, seq), "seq %v, read %d", s, seq)
	})
}
