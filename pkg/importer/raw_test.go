package importer

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

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

// A record's parts join into what splice makes, whatever members are raw.
func TestParts(t *testing.T) {
	m := record.NewMap("role", "assistant", "content", "x", "responseId", "msg_1", "model", "m\u00e9", "timestamp", "t")
	content, ts := []byte(`[ {"type" : "text", "text": "\u00e9"} ]`), []byte(`"2026-01-02T03:04:05.000Z"`)
	for _, raw := range []map[string][]byte{
		{},
		{"content": content},
		{"role": []byte(`"user"`)},
		{"timestamp": ts},
		{"content": content, "timestamp": ts},
		{"role": []byte(`"user"`), "content": content, "timestamp": ts},
	} {
		p := newParts(m, raw)
		require.NotNil(t, p)
		want := splice(m, raw)
		require.Equal(t, string(want), string(p.json()), "%v", raw)
		require.Equal(t, len(want), p.size)
	}
	require.Nil(t, newParts(m, map[string][]byte{"content": nil}), "a value not found: encode the whole record")
}

func TestValidCapture(t *testing.T) {
	good := []string{`0`, `-0`, `1.5e-3`, `1E400`, `18446744073709551617`, `"a\u00e9\n\"\\\/"`, `"\ud800"`, `"é ☃ 😀"`,
		`[]`, `{}`, ` { "a" : [ 1 , true , false , null , { } ] } `, `{"a":1,"a":2}`}
	for _, g := range good {
		require.True(t, validCapture([]byte(g), 128, nil), g)
		_, err := record.DecodeJSON([]byte(g))
		require.NoError(t, err, g)
	}
	bad := []string{``, ` `, `01`, `1.`, `.5`, `1e`, `+1`, `-`, `tru`, `nul`, `"abc`, "\"a\x01\"", `"\x"`, `"\u12g4"`,
		"\"\xff\"", "\"\xed\xa0\x80\"", `[1,]`, `{"a":1,}`, `{"a"}`, `{1:2}`, `[1 2]`, `1 2`, `{"a":1}}`}
	for _, b := range bad {
		require.False(t, validCapture([]byte(b), 128, nil), "%q", b)
	}
	deep := strings.Repeat("[", 128) + strings.Repeat("]", 128)
	require.True(t, validCapture([]byte(deep), 128, nil))
	require.False(t, validCapture([]byte(deep), 127, nil))
}

// FuzzValidJSON: what validCapture passes, the record decoder accepts, so
// that bytes kept without decoding are never refused by ctxd.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,"x\n",{"b":null}]}`, `"\ud83d\ude00"`, `-12.5E+3`, `[[[]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !validCapture(b, record.DefaultMaxDepth, nil) {
			return
		}
		if _, err := record.DecodeJSON(b); err != nil {
			t.Fatalf("validCapture passed %q, the decoder refuses it: %v", b, err)
		}
	})
}

func TestValidCapture_Keeps(t *testing.T) {
	inner := &capture{keys: []string{"content"}, vals: make([][]byte, 1)}
	top := &capture{keys: []string{"type", "message"}, sub: []*capture{nil, inner}, vals: make([][]byte, 2)}
	line := []byte(`{"type":"user","message":{"content":[1]},"x":{"content":2},"message":{"role":"user"}}`)
	require.True(t, validCapture(line, 128, top))
	require.Equal(t, `"user"`, string(top.vals[0]))
	require.Equal(t, `{"role":"user"}`, string(top.vals[1]), "the last of repeated keys")
	require.Nil(t, inner.vals[0], "what an earlier, replaced value held is forgotten")

	require.False(t, validCapture([]byte(`{"\u0074ype":"user"}`), 128, top), "a key spelled with escapes may be a captured one")
	require.True(t, validCapture([]byte(`{"\u0074ype":"user"}`), 128, nil))
}

// A file read in chunks, by several workers, gives every line the number
// and the decoding that reading it line by line gives, in order: chunk
// boundaries anywhere, blank lines, CRLF, lines that are not objects,
// invalid UTF-8 replaced, and a last line without its newline; a line that
// does not decode fails, the first one in the file's order.
func TestDecodeChunks(t *testing.T) {
	pad := strings.Repeat("y", 300) // past scanMin: the Claude Code lines are scanned
	lines := []string{
		`{"type":"user","uuid":"u1","message":{"role":"user","content":"` + pad + `"}}`,
		``, `   `, "\t",
		`{"a":1}` + "\r",
		"{\"c\":\"\xff\"}",
		`[1,2]`,
		`{"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"id":"m","content":[{"type":"tool_use","id":"t1","name":"n","input":{}}],"x":"` + pad + `"}}`,
		`"a string"`,
		`{"type":"user","uuid":"r1","parentUuid":"a1","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"` + pad + `"}]}}`,
		``,
		`{"b":"\u00e9"}`,
	}
	type seen struct {
		n      int
		line   string
		json   string
		blocks []block
	}
	read := func(data []byte, scan scanner, size, workers int) ([]seen, Report) {
		var out []seen
		var rep Report
		err := decodeChunks(data, &rep, scan, size, workers, func(n int, line []byte, m *record.Map, k kept) {
			b, err := record.MarshalJSON(m)
			require.NoError(t, err)
			out = append(out, seen{n: n, line: string(line), json: string(b) + string(k.content), blocks: k.blocks})
		})
		require.NoError(t, err)
		return out, rep
	}
	for _, end := range []string{"", "\n", "\n\n"} {
		data := []byte(strings.Join(lines, "\n") + end)
		// The reference: line by line, each decoded whole.
		var want []seen
		var wantRep Report
		eachLine(data, func(n int, line []byte) {
			wantRep.Entries++
			if !utf8.Valid(line) {
				line = bytes.ToValidUTF8(line, []byte("\uFFFD"))
			}
			v, err := record.DecodeJSON(line)
			if m, ok := v.(*record.Map); err == nil && ok {
				b, err := record.MarshalJSON(m)
				require.NoError(t, err)
				want = append(want, seen{n: n, line: string(line), json: string(b)})
			}
		})
		for _, size := range []int{1, 2, 7, 40, 333, 1 << 20} {
			for _, workers := range []int{1, 3} {
				got, rep := read(data, nil, size, workers)
				require.Equal(t, want, got, "size %d, %d workers, ending %q", size, workers, end)
				require.Equal(t, wantRep.Entries, rep.Entries)
				require.Len(t, rep.Unknown, 2)
				require.Equal(t, []string{"line 7", "line 9"}, []string{rep.Unknown[0].Where, rep.Unknown[1].Where})
				require.Equal(t, []Note{{"line 6", "invalid UTF-8 replaced with U+FFFD: 1 byte, at byte 6", 1}}, rep.Approximations)

				// Scanned, as Claude Code's lines are: the same as in one chunk.
				one, oneRep := read(data, claudeScan, 1<<30, 1)
				require.Len(t, one[3].blocks, 1, "the assistant line is scanned")
				got, rep = read(data, claudeScan, size, workers)
				require.Equal(t, one, got, "size %d, %d workers, ending %q", size, workers, end)
				require.Equal(t, oneRep, rep)
			}
		}
	}
}

func TestDecodeChunks_Undecodable(t *testing.T) {
	var lines []string
	for i := range 300 {
		lines = append(lines, fmt.Sprintf(`{"n":%d}`, i))
	}
	lines[100], lines[200], lines[250] = "nope", `{"a":`, "[1]"
	data := []byte(strings.Join(lines, "\n"))
	for _, size := range []int{1, 7, 40, 333, 1 << 20} {
		for _, workers := range []int{1, 3} {
			var rep Report
			calls := 0
			err := decodeChunks(data, &rep, nil, size, workers, func(int, []byte, *record.Map, kept) { calls++ })
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, "line 101", e.Where, "size %d, %d workers", size, workers)
			require.ErrorIs(t, err, record.ErrSyntax)
			require.Equal(t, 100, calls, "the lines before it, no further")
		}
	}
}
