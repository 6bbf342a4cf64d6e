package record_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
)

func TestIsJSON(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"", false},
		{"{}", true},
		{" {}", true},
		{"\t{}", true},
		{"\n{}", true},
		{"\r\n{}", true},
		{"[1]", false},
		{"\x80", false},
		{"\x81\xa1a\x01", false},
		{"\xde\x00\x00", false},
		{"\xdf\x00\x00\x00\x00", false},
	}
	for _, tt := range tests {
		if got := record.IsJSON([]byte(tt.in)); got != tt.want {
			t.Errorf("IsJSON(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	// No msgpack map starts like a JSON object.
	for c := range 256 {
		in := []byte{byte(c)}
		if record.IsJSON(in) && (c&0xf0 == 0x80 || c == 0xde || c == 0xdf) {
			t.Errorf("IsJSON takes msgpack map head 0x%02x for JSON", c)
		}
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"json", []byte(`{"role":"user","content":"hi"}`), `{"role": "user", "content": "hi"}`},
		{"json with space", []byte(" \r\n\t{ \"a\" : 1 }\n"), `{"a": int64(1)}`},
		{"msgpack fixmap", []byte("\x82\xa4role\xa4user\xa1n\x01"), `{"role": "user", "n": int64(1)}`},
		{"msgpack map16", []byte("\xde\x00\x01\xa1a\xc0"), `{"a": null}`},
		{"msgpack map32", []byte("\xdf\x00\x00\x00\x00"), `{}`},
		{"msgpack empty map", []byte("\x80"), `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := record.Decode(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := repr(m); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// A value that is not a map is refused as such in either format, however
// its first byte looks.
func TestDecode_NotMap(t *testing.T) {
	tests := []struct {
		name, in, format, what string
	}{
		{"json array", `[1]`, "json", "array"},
		{"json string", `"s"`, "json", "string"},
		{"json number", `12`, "json", "number"},
		{"json negative number", `-1.5`, "json", "number"},
		{"json true", `true`, "json", "boolean"},
		{"json null", `null`, "json", "null"},
		{"json array after space", ` [1]`, "json", "array"},
		{"json string after newline", "\n\"s\"", "json", "string"},
		{"msgpack array", "\x92\x01\x02", "msgpack", "array"},
		{"msgpack array16", "\xdc\x00\x00", "msgpack", "array"},
		{"msgpack str", "\xa1s", "msgpack", "string"},
		{"msgpack nil", "\xc0", "msgpack", "null"},
		{"msgpack bool", "\xc3", "msgpack", "boolean"},
		{"msgpack negative fixint", "\xff", "msgpack", "number"},
		{"msgpack float", "\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00", "msgpack", "number"},
		{"msgpack bin", "\xc4\x01\x00", "msgpack", "string"},
		{"msgpack timestamp", "\xd6\xff\x00\x00\x00\x00", "msgpack", "string"},
		{"one byte", "5", "msgpack", "number"},
		{"msgpack fixint 0x7b", "{", "json", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := record.Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("decoded %s", repr(m))
			}
			if tt.what == "" {
				// '{' alone is a truncated JSON object, not the msgpack
				// integer 123.
				checkDecodeError(t, err, tt.format, record.ErrTruncated, 1)
				return
			}
			checkDecodeError(t, err, tt.format, record.ErrNotMap, -1)
			if !strings.Contains(err.Error(), tt.what) {
				t.Errorf("error %q does not name %q", err, tt.what)
			}
		})
	}
}

// Input that is neither format is a syntax error, not a guess.
func TestDecode_Garbage(t *testing.T) {
	tests := []struct {
		name, in string
		err      error
	}{
		{"never used msgpack byte", "\xc1", record.ErrSyntax},
		{"never used byte then text", "\xc1{}", record.ErrSyntax},
		{"binary noise", "\x00\x01\x02\x03", record.ErrSyntax},
		{"text", "hello", record.ErrSyntax},
		{"cut json array", "[1", record.ErrTruncated},
		{"json with trailing garbage", "{}}", record.ErrSyntax},
		{"msgpack with trailing garbage", "\x80\x80", record.ErrSyntax},
		{"invalid UTF-8 in msgpack key", "\x81\xa1\xff\x01", record.ErrInvalidUTF8},
		{"msgpack ext", "\x81\xa1e\xd4\x01\x00", record.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := record.Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("decoded %s", repr(m))
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("error %q is not %v", err, tt.err)
			}
			var de *record.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T is not a *DecodeError", err)
			}
		})
	}
}

// JSON after a byte order mark is refused, and the error says so: a
// record (or a request) never starts with one, and none is skipped, so
// that every decoder of a record, whatever its version, agrees on it.
func TestDecode_ByteOrderMark(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"UTF-8 before an object", "\xef\xbb\xbf{\"role\":\"user\",\"content\":\"hi\"}", "json at byte 0: byte order mark before the JSON text: UTF-8's EF BB BF; remove it"},
		{"UTF-8 before white space", "\xef\xbb\xbf \n{}", "UTF-8's EF BB BF"},
		{"UTF-8 before an array", "\xef\xbb\xbf[1]", "UTF-8's EF BB BF"},
		{"UTF-8 alone", "\xef\xbb\xbf", "UTF-8's EF BB BF"},
		{"UTF-16 little-endian", "\xff\xfe{\x00}\x00", "UTF-16's FF FE; JSON must be UTF-8, with no mark"},
		{"UTF-16 big-endian", "\xfe\xff\x00{\x00}", "UTF-16's FE FF; JSON must be UTF-8, with no mark"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, decode := range []func([]byte) (any, error){
				func(b []byte) (any, error) { return record.Decode(b) },
				record.DecodeJSON,
			} {
				v, err := decode([]byte(tt.in))
				if err == nil {
					t.Fatalf("decoded %v", v)
				}
				checkDecodeError(t, err, "json", record.ErrByteOrderMark, 0)
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %q does not say %q", err, tt.want)
				}
			}
		})
	}
	// The same bytes elsewhere are what they are: inside a JSON string, a
	// character; a msgpack value they cannot start.
	m, err := record.Decode([]byte("{\"a\":\"\xef\xbb\xbf\"}"))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := m.String("a"); s != "\ufeff" {
		t.Errorf("got %q", s)
	}
	if _, err := record.Decode([]byte("\xef")); !errors.Is(err, record.ErrNotMap) {
		t.Errorf("the msgpack integer -17 alone: %v", err)
	}
}

// TestDecode_TextSaysWhat: plain text sent as a record is reported as
// what it is, not as a msgpack syntax error at byte 1.
func TestDecode_TextSaysWhat(t *testing.T) {
	_, err := record.Decode([]byte("hello, plain text"))
	if err == nil || !strings.Contains(err.Error(), `not a JSON object or msgpack map (starts with "hello, plain tex...")`) {
		t.Fatalf("error %v", err)
	}
}

// The text quoted is cut after whole characters, never inside one.
func TestDecode_TextCutByCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"hello wonderfulé world": `(starts with "hello wonderfulé...")`,
		"hi, 日本語のテキストです、とても長い":   `(starts with "hi, 日本語のテキストです、と...")`,
		"séance":                        `(starts with "séance")`,
		"ab\xff\xfecdefghijklmnopqrstu": `(starts with "ab\xff\xfecdefghijklmn...")`,
	} {
		_, err := record.Decode([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %s", in, err, want)
		}
	}
}

func TestDecodeError(t *testing.T) {
	err := error(&record.DecodeError{Format: "json", Offset: 7, Err: record.ErrSyntax, Detail: "expected ':'"})
	if got, want := err.Error(), "json at byte 7: syntax error: expected ':'"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, record.ErrSyntax) || errors.Is(err, record.ErrTruncated) {
		t.Error("errors.Is does not match the sentinel alone")
	}
	err = &record.DecodeError{Format: "msgpack", Err: record.ErrEmpty}
	if got, want := err.Error(), "msgpack at byte 0: empty input"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// Damaged records, and noise, fail with a *DecodeError or decode to
// something that encodes; they never panic.
func TestDecode_Damaged(t *testing.T) {
	var samples [][]byte
	for _, s := range jsonSamples {
		samples = append(samples, []byte(s))
	}
	samples = append(samples, msgpackSamples(t)...)
	g := newGen(99)
	for range 20000 {
		var in []byte
		if g.r.IntN(4) == 0 {
			in = make([]byte, g.r.IntN(24))
			for i := range in {
				in[i] = byte(g.r.Uint32())
			}
		} else {
			in = bytes.Clone(samples[g.r.IntN(len(samples))])
			for range 1 + g.r.IntN(3) {
				if len(in) == 0 {
					break
				}
				i := g.r.IntN(len(in))
				switch g.r.IntN(3) {
				case 0:
					in[i] = byte(g.r.Uint32())
				case 1:
					in = append(in[:i], in[i+1:]...)
				default:
					in = slices.Insert(in, i, byte(g.r.Uint32()))
				}
			}
		}
		m, err := record.Decode(in)
		if err != nil {
			var de *record.DecodeError
			if !errors.As(err, &de) || de.Offset < 0 || de.Offset > len(in) {
				t.Fatalf("%q: error %v", in, err)
			}
			continue
		}
		if _, err := record.MarshalJSON(m); err != nil {
			t.Fatalf("%q decodes to %s, which does not encode: %v", in, repr(m), err)
		}
	}
}

// Decoders share pooled scratch space: records decoded at the same time
// stay apart.
func TestDecode_Concurrent(t *testing.T) {
	inputs := [][]byte{[]byte(assistantRecord), screenshotRecord()}
	inputs = append(inputs, msgpackSamples(t)...)
	want := make([]string, len(inputs))
	for i, in := range inputs {
		want[i] = repr(mustDecode(t, in))
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for w := range 4 {
		wg.Go(func() {
			for n := range 200 {
				i := (w + n) % len(inputs)
				m, err := record.Decode(inputs[i])
				if err != nil || repr(m) != want[i] {
					errs <- fmt.Sprintf("input %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"short string", "pi", `"pi"`},
		{"number", int64(-3), "-3"},
		{"null", nil, "null"},
		{"long string", strings.Repeat("x", 100), "a string"},
		{"large map", record.NewMap("k", strings.Repeat("x", 50)), "a map"},
		{"not JSON", math.Inf(1), "a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := record.Describe(tc.v); got != tc.want {
				t.Errorf("Describe = %q, want %q", got, tc.want)
			}
		})
	}
}
