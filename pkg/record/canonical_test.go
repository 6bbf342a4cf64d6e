package record_test

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeCanonical(t *testing.T) {
	for _, c := range []struct {
		in        string
		canonical bool
	}{
		{`{"role":"user","content":"hi"}`, true},
		{`{}`, true},
		{`{"a":[],"b":{},"c":[1,-2,0,true,false,null]}`, true},
		{`{"n":1.50,"m":-0,"big":18446744073709551616,"e":1E400}`, true}, // number literals are kept as written
		{`{"s":"quote \" backslash \\ nl \n cr \r tab \t bs \b ff \f nul \u0000 us \u001f"}`, true},
		{`{"s":"é ✓ 😀 del ` + "\x7f" + `"}`, true},
		{`{"s":"<>&"}`, true},
		{` {"a":1}`, false},
		{`{"a":1} `, false},
		{`{"a": 1}`, false},
		{`{"a":1,"b":[1, 2]}`, false},
		{"{\"a\":1,\n\"b\":2}", false},
		{`{"a":1,"a":2}`, false},        // the second value replaces the first
		{`{"s":"\/"}`, false},           // written as '/'
		{`{"s":"\u000a"}`, false},       // written as \n
		{`{"s":"\u001F"}`, false},       // written in lower case
		{`{"s":"\u0041"}`, false},       // written as A
		{`{"s":"\u00e9"}`, false},       // written as é
		{`{"s":"\ud83d\ude00"}`, false}, // written as the character
		{`{"s":"\ud800"}`, false},       // a lone surrogate: U+FFFD
		{`{"s\u0001":1}`, true},         // keys too
		{`{"s\u0041":1}`, false},
	} {
		m, canonical, err := record.Decoder{}.DecodeCanonical([]byte(c.in))
		require.NoError(t, err, c.in)
		assert.Equal(t, c.canonical, canonical, c.in)
		js, err := record.MarshalJSON(m)
		require.NoError(t, err)
		assert.Equal(t, c.canonical, string(js) == c.in, "%s encodes as %s", c.in, js)
	}

	// msgpack is never canonical JSON.
	mp, err := record.MarshalMsgpack(record.NewMap("role", "user"))
	require.NoError(t, err)
	m, canonical, err := record.Decoder{}.DecodeCanonical(mp)
	require.NoError(t, err)
	assert.False(t, canonical)
	role, _ := m.String("role")
	assert.Equal(t, "user", role)

	// A decoder's error is not canonical.
	_, canonical, err = record.Decoder{}.DecodeCanonical([]byte(`{"a":`))
	require.Error(t, err)
	assert.False(t, canonical)
}

// TestDecoder_Trusted: this package's own encoding decodes the same
// trusted, escapes and all; input that is not its encoding is still
// checked where a string has escapes.
func TestDecoder_Trusted(t *testing.T) {
	trusted := record.Decoder{Trusted: true}
	for _, in := range []string{
		`{"a":"plain","b":"é ✓ 😀","c":"quote \" backslash \\ nl \n nul \u0000","d":[1,-2,"x",{"e":""}],"f":"` + strings.Repeat("iVBORw0K", 1000) + `"}`,
		`{"k\"ey":"v"}`,
	} {
		want, err := record.Decode([]byte(in))
		require.NoError(t, err)
		got, err := trusted.Decode([]byte(in))
		require.NoError(t, err, in)
		assert.True(t, record.Equal(want, got), in)
	}
	// An escape is still read by the checking path.
	_, err := trusted.Decode([]byte(`{"a":"bad \x escape"}`))
	require.ErrorIs(t, err, record.ErrSyntax)
}
