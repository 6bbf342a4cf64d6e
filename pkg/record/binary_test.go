package record

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every record value reads back as itself, and the form's bytes are
// fixed: snapshots written before read the same.
func TestBinary_RoundTrip(t *testing.T) {
	values := []any{
		nil, true, false, "", "héllo", int64(-5), int64(math.MinInt64), uint64(math.MaxUint64),
		3.25, Number("1E400"), []any{}, []any{int64(1), "a", nil},
		NewMap("role", "user", "content", []any{NewMap("type", "text", "text", "hi")}),
		&Map{},
	}
	for _, v := range values {
		b := AppendBinary(nil, v)
		r := NewBinaryReader(b)
		got, err := r.Value(8)
		require.NoError(t, err, "%#v", v)
		require.Zero(t, r.Left())
		require.True(t, Equal(v, got), "%#v read back as %#v", v, got)
	}
	require.Equal(t, []byte{9, 1, 4, 'r', 'o', 'l', 'e', 3, 1, 'u'}, AppendBinary(nil, NewMap("role", "u")))
	require.Equal(t, []byte{8, 2, 4, 0x01, 5, 7}, AppendBinary(nil, []any{int64(-1), uint64(7)}))
	require.Panics(t, func() { AppendBinary(nil, 3) }, "an int is not a record value")
}

// Malformed input is an error that says where, never a panic or a
// count that allocates past the input.
func TestBinary_Malformed(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		says string
	}{
		{nil, "truncated"},
		{[]byte{99}, "unknown tag 99"},
		{[]byte{3, 5, 'a'}, "5 items of 1 bytes at least, in 1 bytes"},
		{[]byte{3, 1, 0xff}, "invalid UTF-8"},
		{[]byte{6, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0}, "non-finite float"},
		{[]byte{7, 3, 'a', 'b', 'c'}, "invalid number literal"},
		{[]byte{8, 0xff, 0xff, 0xff, 0xff, 0x0f}, "items of 1 bytes at least"},
		{[]byte{9, 2, 1, 'a', 0, 1, 'a', 0}, `key "a" repeated`},
		{[]byte(strings.Repeat("\x08\x01", 10) + "\x00"), "nested deeper than 8"},
	} {
		_, err := NewBinaryReader(c.in).Value(8)
		require.ErrorContains(t, err, c.says, "%q", c.in)
	}
	r := NewBinaryReader([]byte{0x80})
	_, err := r.Uvarint("count")
	require.ErrorContains(t, err, "count: truncated at byte 0")
	r = NewBinaryReader([]byte{5, 'a'})
	_, err = r.Bytes("name")
	require.ErrorContains(t, err, "name length: 5, more than the 1 bytes left can hold")
	r = NewBinaryReader([]byte{1, 2})
	_, err = r.Take(3, "head")
	require.ErrorContains(t, err, "head: 3 bytes, 2 left")
}

// Whatever reads as a value is a record value that reads back as itself.
func FuzzBinaryReader(f *testing.F) {
	f.Add(AppendBinary(nil, NewMap("role", "user", "content", []any{int64(1), 2.5, Number("1e3"), nil, true})))
	f.Add([]byte{8, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewBinaryReader(b)
		v, err := r.Value(32)
		if err != nil {
			return
		}
		again := AppendBinary(nil, v)
		got, err := NewBinaryReader(again).Value(32)
		require.NoError(t, err)
		require.True(t, Equal(v, got))
	})
}
