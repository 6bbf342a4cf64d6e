package record_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxd/ctxd/pkg/record"
)

func TestDecodeJSON_Values(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{`null`, `null`},
		{`true`, `true`},
		{` false `, `false`},
		{`0`, `int64(0)`},
		{`-0`, `Number(-0)`},
		{`12`, `int64(12)`},
		{`-7`, `int64(-7)`},
		{`9223372036854775807`, `int64(9223372036854775807)`},
		{`-9223372036854775808`, `int64(-9223372036854775808)`},
		{`9223372036854775808`, `Number(9223372036854775808)`},
		{`-9223372036854775809`, `Number(-9223372036854775809)`},
		{`18446744073709551617`, `Number(18446744073709551617)`},
		{`1.5`, `Number(1.5)`},
		{`2.0`, `Number(2.0)`},
		{`1E1`, `Number(1E1)`},
		{`1e+1`, `Number(1e+1)`},
		{`-0.0`, `Number(-0.0)`},
		{`1E400`, `Number(1E400)`},
		{`""`, `""`},
		{`"a"`, `"a"`},
		{`[]`, `[]`},
		{`{}`, `{}`},
		{"\t\r\n [ 1 , \"a\" , null ] \n", `[int64(1), "a", null]`},
		{`{"z":1,"a":2,"m":{"y":[],"b":{}}}`, `{"z": int64(1), "a": int64(2), "m": {"y": [], "b": {}}}`},
		{`{"a":1,"b":2,"a":3}`, `{"a": int64(3), "b": int64(2)}`},
		{`{"":0}`, `{"": int64(0)}`},
		// Strings.
		{`"\"\\\/\b\f\n\r\t"`, `"\"\\/\b\f\n\r\t"`},
		{`"\u00e9\u00E9"`, `"éé"`},
		{`"\u0000"`, `"\x00"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`"\uD83D\uDE00"`, `"😀"`},
		{`"héllo 😀 €"`, `"héllo 😀 €"`},
		{"\"\x7f\"", `"\x7f"`},
		{`"a\nb` + strings.Repeat("x", 40) + `"`, `"a\nb` + strings.Repeat("x", 40) + `"`},
		// A lone surrogate has no UTF-8 form: it becomes U+FFFD, as in
		// encoding/json.
		{`"\ud800"`, `"�"`},
		{`"\udc00"`, `"�"`},
		{`"\ud800x"`, `"�x"`},
		{`"\ud800\u0041"`, `"�A"`},
		{`"\ud800\ud800"`, `"��"`},
		{`"\ud800\ud800\udc00"`, `"�𐀀"`},
		{`"\ude00\ud83d"`, `"��"`},
		{`"\ud800\n"`, `"�\n"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			v, err := record.DecodeJSON([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := repr(v); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			// encoding/json agrees on every string and on the structure.
			var std any
			d := json.NewDecoder(strings.NewReader(tt.in))
			d.UseNumber()
			if err := d.Decode(&std); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			if !reflect.DeepEqual(plain(v), plain(std)) {
				t.Errorf("encoding/json decodes %#v, we %#v", plain(std), plain(v))
			}
		})
	}
}

func TestDecodeJSON_Errors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		err  error
		off  int
	}{
		{"empty", ``, record.ErrEmpty, 0},
		{"only space", " \n\t", record.ErrEmpty, 3},
		{"truncated literal", `nul`, record.ErrTruncated, 3},
		{"bad literal", `nulx`, record.ErrSyntax, 3},
		{"capital literal", `True`, record.ErrSyntax, 0},
		{"trailing comma in array", `[1,]`, record.ErrSyntax, 3},
		{"missing comma", `[1 2]`, record.ErrSyntax, 3},
		{"missing comma in map", `{"a":1 "b":2}`, record.ErrSyntax, 7},
		{"number key", `{1:2}`, record.ErrSyntax, 1},
		{"single quotes", `{'a':1}`, record.ErrSyntax, 1},
		{"missing colon", `{"a" 1}`, record.ErrSyntax, 5},
		{"trailing comma in map", `{"a":1,}`, record.ErrSyntax, 7},
		{"leading zero", `01`, record.ErrSyntax, 1},
		{"leading zero in array", `[-01]`, record.ErrSyntax, 3},
		{"dot without digits", `1.`, record.ErrTruncated, 2},
		{"dot then letter", `1.x`, record.ErrSyntax, 2},
		{"exponent without digits", `1e`, record.ErrTruncated, 2},
		{"exponent sign only", `1e+`, record.ErrTruncated, 3},
		{"exponent then letter", `[1e+x]`, record.ErrSyntax, 4},
		{"minus only", `-`, record.ErrTruncated, 1},
		{"minus letter", `-a`, record.ErrSyntax, 1},
		{"leading dot", `.5`, record.ErrSyntax, 0},
		{"plus sign", `+1`, record.ErrSyntax, 0},
		{"hex number", `0x10`, record.ErrSyntax, 1},
		{"NaN", `NaN`, record.ErrSyntax, 0},
		{"Infinity", `Infinity`, record.ErrSyntax, 0},
		{"minus Infinity", `-Infinity`, record.ErrSyntax, 1},
		{"NaN in map", `{"a":NaN}`, record.ErrSyntax, 5},
		{"unterminated string", `"abc`, record.ErrTruncated, 4},
		{"unterminated escaped string", `"a\n`, record.ErrTruncated, 4},
		{"control character", "\"a\x01\"", record.ErrSyntax, 2},
		{"raw tab", "\"\t\"", record.ErrSyntax, 1},
		{"raw newline after escape", "\"\\n\n\"", record.ErrSyntax, 3},
		{"raw NUL", "\"\x00\"", record.ErrSyntax, 1},
		{"bad escape", `"\x"`, record.ErrSyntax, 1},
		{"bad escape after text", `"abc\'"`, record.ErrSyntax, 4},
		{"escape at end", `"\`, record.ErrTruncated, 2},
		{"short unicode escape", `"\u12"`, record.ErrSyntax, 5},
		{"unicode escape at end", `"\u12`, record.ErrTruncated, 5},
		{"bad unicode escape", `"\uZZZZ"`, record.ErrSyntax, 3},
		{"bad second surrogate", `"\ud800\uZZZZ"`, record.ErrSyntax, 9},
		{"invalid UTF-8", "\"\xff\"", record.ErrInvalidUTF8, 1},
		{"invalid UTF-8 after text", "\"abc\xff\"", record.ErrInvalidUTF8, 4},
		{"invalid UTF-8 after escape", "\"\\n\xff\"", record.ErrInvalidUTF8, 3},
		{"invalid UTF-8 in key", "{\"\xc3\":1}", record.ErrInvalidUTF8, 2},
		{"cut UTF-8 sequence", "\"\xc3\"", record.ErrInvalidUTF8, 1},
		{"UTF-8 surrogate", "\"\xed\xa0\x80\"", record.ErrInvalidUTF8, 1},
		{"overlong UTF-8", "\"\xc0\xaf\"", record.ErrInvalidUTF8, 1},
		{"UTF-8 beyond U+10FFFF", "\"\xf4\x90\x80\x80\"", record.ErrInvalidUTF8, 1},
		{"UTF-8 continuation byte", "\"\x80\"", record.ErrInvalidUTF8, 1},
		{"UTF-8 at end", "\"\xe2\x82", record.ErrTruncated, 1},
		{"garbage", "\x00\x01\x02", record.ErrSyntax, 0},
		{"byte order mark", "\xef\xbb\xbf{}", record.ErrByteOrderMark, 0},
		{"garbage after value", `{} x`, record.ErrSyntax, 3},
		{"two values", `{}{}`, record.ErrSyntax, 2},
		{"comment", `{} // c`, record.ErrSyntax, 3},
		{"unclosed map", `{"a":1`, record.ErrTruncated, 6},
		{"unclosed array", `[1,2`, record.ErrTruncated, 4},
		{"close mismatch", `[1}`, record.ErrSyntax, 2},
		{"colon in array", `[1:2]`, record.ErrSyntax, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := record.DecodeJSON([]byte(tt.in))
			if err == nil {
				t.Fatalf("decoded %s", repr(v))
			}
			checkDecodeError(t, err, "json", tt.err, tt.off)
		})
	}
}

// jsonSamples are valid records used where any record will do.
var jsonSamples = []string{
	`{}`,
	`{"a":1}`,
	assistantRecord,
	`{"role":"user","content":"h\u00e9llo \ud83d\ude00 \"quoted\"\n\tüñí €","n":[-0,0.5,-1.5e-3,1E400,18446744073709551617,true,false,null],"m":{"":{},"x":[[]]}}`,
	`{ "spaced" : [ 1 , 2 ] , "s" : "\u0041\\" }`,
	`{"deep":[[[[{"a":[{"b":{"c":"d"}}]}]]]],"neg":-12,"t":true}`,
}

// Every proper prefix of a record is an error, never a panic and never a
// value: a record cut anywhere is truncated.
func TestDecodeJSON_Truncated(t *testing.T) {
	for _, s := range jsonSamples {
		if _, err := record.DecodeJSON([]byte(s)); err != nil {
			t.Fatalf("sample %s: %v", s, err)
		}
		for i := 1; i < len(s); i++ {
			prefix := []byte(s[:i])
			_, err := record.DecodeJSON(prefix)
			checkDecodeError(t, err, "json", record.ErrTruncated, -1)
			_, err = record.Decode(prefix)
			checkDecodeError(t, err, "json", record.ErrTruncated, -1)
		}
		_, err := record.Decode([]byte(s[:0]))
		checkDecodeError(t, err, "msgpack", record.ErrEmpty, 0)
	}
	// Cut inside a long string.
	shot := screenshotRecord()
	for _, i := range []int{300, 301, 1000, 100000, len(shot) - 60} {
		_, err := record.Decode(shot[:i])
		checkDecodeError(t, err, "json", record.ErrTruncated, i)
	}
}

// nestingOffset returns the offset of the container that opens nesting
// level n (1-based) in a document whose keys hold no brackets.
func nestingOffset(doc []byte, n int) int {
	for i, c := range doc {
		if c == '[' || c == '{' {
			if n--; n == 0 {
				return i
			}
		}
	}
	return -1
}

func TestDecodeJSON_Depth(t *testing.T) {
	shapes := []struct {
		open, close string
		levels      int // nesting levels per repetition
	}{
		{"[", "]", 1},
		{`{"a":`, "}", 1},
		{`[{"a":`, "}]", 2},
	}
	for _, limit := range []int{1, 2, 5, record.DefaultMaxDepth} {
		d := record.Decoder{MaxDepth: limit}
		for _, s := range shapes {
			nest := func(levels int) []byte {
				reps := (levels + s.levels - 1) / s.levels
				return []byte(strings.Repeat(s.open, reps) + "1" + strings.Repeat(s.close, reps))
			}
			if limit%s.levels == 0 {
				ok := nest(limit)
				if _, err := d.DecodeJSON(ok); err != nil {
					t.Errorf("limit %d, %s: %v", limit, ok, err)
				}
			}
			bad := nest(limit + 1)
			_, err := d.DecodeJSON(bad)
			// The container that opens level limit+1 is refused.
			checkDecodeError(t, err, "json", record.ErrTooDeep, nestingOffset(bad, limit+1))
		}
	}
	// The zero Decoder allows DefaultMaxDepth levels.
	ok := []byte(strings.Repeat("[", record.DefaultMaxDepth) + strings.Repeat("]", record.DefaultMaxDepth))
	if _, err := record.DecodeJSON(ok); err != nil {
		t.Errorf("%d levels: %v", record.DefaultMaxDepth, err)
	}
	// Input far deeper than the limit fails at the limit, without recursing
	// through all of it.
	for _, open := range []string{"[", `{"a":`, `{"a":[`} {
		deep := []byte(strings.Repeat(open, 100000))
		_, err := record.DecodeJSON(deep)
		checkDecodeError(t, err, "json", record.ErrTooDeep, nestingOffset(deep, record.DefaultMaxDepth+1))
		_, err = record.Decode(deep)
		if open == "[" {
			// Not a map, and too deep to say so.
			checkDecodeError(t, err, "json", record.ErrTooDeep, record.DefaultMaxDepth)
		} else {
			checkDecodeError(t, err, "json", record.ErrTooDeep, -1)
		}
	}
}

func TestDecodeJSON_TooLarge(t *testing.T) {
	in := []byte(`{"a":"0123456789"}`)
	if _, err := (record.Decoder{MaxBytes: len(in)}).DecodeJSON(in); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	_, err := record.Decoder{MaxBytes: len(in) - 1}.DecodeJSON(in)
	checkDecodeError(t, err, "json", record.ErrTooLarge, len(in)-1)
	_, err = record.Decoder{MaxBytes: len(in) - 1}.Decode(in)
	checkDecodeError(t, err, "json", record.ErrTooLarge, len(in)-1)
}

// Keys keep the order they were read in; a repeated key keeps its first
// position and takes the last value, in small maps and large ones.
func TestDecodeJSON_DuplicateKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	const n = 300
	for i := range n {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	for i := n - 1; i >= 0; i -= 3 {
		fmt.Fprintf(&b, `"k%d":"again %d",`, i, i)
	}
	b.WriteString(`"last":true}`)
	v, err := record.DecodeJSON([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(*record.Map)
	if m.Len() != n+1 {
		t.Fatalf("%d members, want %d", m.Len(), n+1)
	}
	for i := range n {
		mem := m.Members[i]
		if want := fmt.Sprintf("k%d", i); mem.Key != want {
			t.Fatalf("member %d is %q, want %q", i, mem.Key, want)
		}
		var want any = int64(i)
		if (n-1-i)%3 == 0 {
			want = fmt.Sprintf("again %d", i)
		}
		if mem.Value != want {
			t.Errorf("%s = %s, want %v", mem.Key, repr(mem.Value), want)
		}
	}
	if m.Members[n].Key != "last" {
		t.Errorf("last member %q", m.Members[n].Key)
	}

	// A map of one key repeated many times holds one member.
	many := `{` + strings.Repeat(`"a":1,`, 100000) + `"a":2}`
	v, err = record.DecodeJSON([]byte(many))
	if err != nil {
		t.Fatal(err)
	}
	if got := repr(v); got != `{"a": int64(2)}` {
		t.Errorf("got %s", got)
	}
}

// Numbers keep their literal text: a JSON record encodes back to the same
// bytes.
func TestDecodeJSON_NumbersRoundTrip(t *testing.T) {
	literals := []string{
		"0", "-0", "1", "-1", "9007199254740993", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "18446744073709551615", "18446744073709551617", "-18446744073709551617",
		"1E400", "-1E400", "1e-400", "0.1", "1e-7", "1.5", "2.0", "1E1", "1e+1", "1E-1", "10e-1", "-0.0",
		"1E999999999", "123456789012345678901234567890.123456789e-5", "0.30000000000000004",
		"5e-324", "1.7976931348623157e308", "0e0", "-0E-0",
	}
	for _, lit := range literals {
		for _, doc := range []string{lit, `{"n":` + lit + `}`, `[` + lit + `,` + lit + `]`} {
			v, err := record.DecodeJSON([]byte(doc))
			if err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			out, err := record.MarshalJSON(v)
			if err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
			if string(out) != doc {
				t.Errorf("%s encodes back as %s", doc, out)
			}
		}
	}
}

// Records the project's tests and examples use decode identically here and
// in encoding/json, and encode back to the same bytes once compacted.
func TestDecodeJSON_MatchesEncodingJSON(t *testing.T) {
	for _, s := range jsonSamples {
		v, err := record.DecodeJSON([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		var std any
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		if err := d.Decode(&std); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(plain(v), plain(std)) {
			t.Errorf("%s:\nours %#v\nstd  %#v", s, plain(v), plain(std))
		}
		if !utf8.ValidString(s) || strings.Contains(s, `\u`) || strings.Contains(s, " ") {
			continue
		}
		out, err := record.MarshalJSON(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != s {
			t.Errorf("re-encoded\n got %s\nwant %s", out, s)
		}
	}
}

// Long strings take word-at-a-time paths: a character that needs a closer
// look is found wherever it sits.
func TestDecodeJSON_LongStrings(t *testing.T) {
	specials := []struct {
		raw  string // as it appears inside the literal
		want string // decoded; "" when it is an error
		err  error
	}{
		{`\"`, `"`, nil},
		{`\\`, `\`, nil},
		{`\n`, "\n", nil},
		{`\u00e9`, "é", nil},
		{"é", "é", nil},
		{"😀", "😀", nil},
		{"\x7f", "\x7f", nil},
		{"\x01", "", record.ErrSyntax},
		{"\x1f", "", record.ErrSyntax},
		{"\xff", "", record.ErrInvalidUTF8},
		{"\xc3", "", record.ErrInvalidUTF8},
	}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 31, 32, 33, 40, 63, 64, 255, 256, 257, 300} {
		for _, sp := range specials {
			for _, after := range []int{0, 1, 8, 40, 300} {
				in := `"` + strings.Repeat("a", n) + sp.raw + strings.Repeat("b", after) + `"`
				v, err := record.DecodeJSON([]byte(in))
				if sp.err != nil {
					checkDecodeError(t, err, "json", sp.err, n+1)
					continue
				}
				want := strings.Repeat("a", n) + sp.want + strings.Repeat("b", after)
				if err != nil || v != want {
					t.Fatalf("%q: got %q, %v", in, v, err)
				}
				// And back: the encoder finds it too.
				out, _ := record.MarshalJSON(v)
				var back string
				if err := json.Unmarshal(out, &back); err != nil || back != want {
					t.Fatalf("%q encodes as %s", want, out)
				}
			}
		}
	}
}

// Long strings with an escape every few hundred bytes, and documents of
// many long strings, are read in one pass: searching to the end of the
// input after each escape would make this test take seconds rather than
// milliseconds.
func TestDecodeJSON_ManyEscapes(t *testing.T) {
	chunk := strings.Repeat("x", 300)
	for _, esc := range []string{`\n`, `\"`, `\\`, `\u00e9`} {
		in := `{"s":"` + strings.Repeat(chunk+esc, 20000) + `"}`
		m := mustDecode(t, []byte(in))
		s, _ := m.String("s")
		if len(s) < 20000*300 {
			t.Fatalf("%s: decoded %d bytes", esc, len(s))
		}
		out, err := record.MarshalJSON(m)
		if err != nil {
			t.Fatal(err)
		}
		if back := mustDecode(t, out); !record.Equal(m, back) {
			t.Fatalf("%s: does not survive encoding", esc)
		}
	}
	// Many long strings and no backslash anywhere.
	in := `[` + strings.Repeat(`"`+chunk+`",`, 20000) + `""]`
	if _, err := record.DecodeJSON([]byte(in)); err != nil {
		t.Fatal(err)
	}
}
