package record_test

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

// TestDecoder_ShareInput: with ShareInput, a long string without escapes
// points into the input, in JSON and msgpack; short strings and escaped
// ones are copied, so the input's later changes reach only the shared.
// With ShareShort too, short strings are shared as well.
func TestDecoder_ShareInput(t *testing.T) {
	long := strings.Repeat("A", record.ShareMinString)
	short := strings.Repeat("b", record.ShareMinString-1)
	escaped := strings.Repeat("c", record.ShareMinString) + `\n`
	js := []byte(`{"long":"` + long + `","short":"` + short + `","escaped":"` + escaped + `"}`)
	m := record.NewMap("long", long, "short", short, "escaped", strings.Repeat("c", record.ShareMinString)+"\n")
	mp, err := record.MarshalMsgpack(m)
	require.NoError(t, err)

	for _, in := range []struct {
		name string
		data []byte
	}{{"json", js}, {"msgpack", mp}} {
		t.Run(in.name, func(t *testing.T) {
			data := bytes.Clone(in.data)
			v, err := record.Decoder{ShareInput: true}.Decode(data)
			require.NoError(t, err)
			require.True(t, record.Equal(m, v))
			within := func(m *record.Map, key string) bool {
				s, _ := m.String(key)
				p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
				start := uintptr(unsafe.Pointer(&data[0]))
				return p >= start && p < start+uintptr(len(data))
			}
			require.True(t, within(v, "long"), "a long string is shared")
			require.False(t, within(v, "short"), "a short string is copied")
			if in.name == "json" {
				require.False(t, within(v, "escaped"), "an escaped string is copied")
			}

			all, err := record.Decoder{ShareInput: true, ShareShort: true}.Decode(data)
			require.NoError(t, err)
			require.True(t, record.Equal(m, all))
			require.True(t, within(all, "long"), "ShareShort: a long string is shared")
			require.True(t, within(all, "short"), "ShareShort: a short string is shared")
			if in.name == "json" {
				require.False(t, within(all, "escaped"), "ShareShort: an escaped string is copied")
			}

			plain, err := record.Decoder{}.Decode(data)
			require.NoError(t, err)
			for _, k := range []string{"long", "short", "escaped"} {
				require.False(t, within(plain, k), "without ShareInput, %s is copied", k)
			}
		})
	}
}
