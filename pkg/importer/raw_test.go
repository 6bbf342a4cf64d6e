package importer

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

func TestSpan(t *testing.T) {
	line := []byte(` {"a":1, "message" : {"content":[{"type":"text","text":"x \"}\" y"}],"n":-1.5e3},"b":[1,{"c":"]"}],"d":null,"message2":true} `)
	cases := []struct {
		path []string
		want string
	}{
		{[]string{"a"}, `1`},
		{[]string{"message"}, `{"content":[{"type":"text","text":"x \"}\" y"}],"n":-1.5e3}`},
		{[]string{"message", "content"}, `[{"type":"text","text":"x \"}\" y"}]`},
		{[]string{"message", "n"}, `-1.5e3`},
		{[]string{"b"}, `[1,{"c":"]"}]`},
		{[]string{"d"}, `null`},
		{[]string{"message2"}, `true`},
	}
	for _, c := range cases {
		require.Equal(t, c.want, string(span(line, c.path...)), "%v", c.path)
	}
	for _, path := range [][]string{{"missing"}, {"a", "b"}, {"b", "c"}, {"message", "content", "type"}} {
		require.Nil(t, span(line, path...), "%v", path)
	}
	require.Equal(t, `2`, string(span([]byte(`{"k":1,"k":2}`), "k")), "the last of repeated keys, as the decoder takes")
	require.Nil(t, span([]byte(`{"\u006b":1}`), "k"), "a key spelled with escapes is left to the decoder")
	require.Nil(t, span([]byte(`{"k":"unterminated`), "k"))
	require.Nil(t, span([]byte(`[1]`), "k"))
}

func TestSplice(t *testing.T) {
	m := record.NewMap("role", "user", "content", "x", "timestamp", "t")
	got := splice(m, map[string][]byte{"content": []byte(`[ {"type" : "text"} ]`)})
	require.Equal(t, `{"role":"user","content":[ {"type" : "text"} ],"timestamp":"t"}`, string(got))
	require.Nil(t, splice(m, map[string][]byte{"content": nil}), "a value not found: encode the whole record")
}
