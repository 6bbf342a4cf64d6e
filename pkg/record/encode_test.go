package record_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ctxd/ctxd/pkg/record"
)

func TestAppendJSON(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"null", nil, `null`},
		{"true", true, `true`},
		{"false", false, `false`},
		{"empty string", "", `""`},
		{"escapes", "a\"\\/\n\r\t\b\f", `"a\"\\/\n\r\t\b\f"`},
		{"control characters", "\x00\x01\x1f\x7f", `"\u0000\u0001\u001f` + "\x7f" + `"`},
		{"UTF-8", "é€😀\u2028", `"é€😀` + "\u2028" + `"`},
		{"invalid UTF-8", "a\xffb\xc3", `"a\ufffdb\ufffd"`},
		{"int64", int64(-42), `-42`},
		{"int64 min", int64(math.MinInt64), `-9223372036854775808`},
		{"uint64 max", uint64(math.MaxUint64), `18446744073709551615`},
		{"float", 1.5, `1.5`},
		{"float 0.1", 0.1, `0.1`},
		{"float 3", 3.0, `3`},
		{"float -0", math.Copysign(0, -1), `-0`},
		{"float 1e-7", 1e-7, `1e-7`},
		{"float 1e-6", 1e-6, `0.000001`},
		{"float 1e20", 1e20, `100000000000000000000`},
		{"float 1e21", 1e21, `1e+21`},
		{"float 2^63", float64(1 << 63), `9223372036854776000`},
		{"float smallest", 5e-324, `5e-324`},
		{"float largest", math.MaxFloat64, `1.7976931348623157e+308`},
		{"float32", float64(float32(0.1)), `0.10000000149011612`},
		{"Number", record.Number("1.50E+3"), `1.50E+3`},
		{"Number -0", record.Number("-0"), `-0`},
		{"empty array", []any{}, `[]`},
		{"nil array", []any(nil), `[]`},
		{"array", []any{int64(1), "a", nil, []any{}}, `[1,"a",null,[]]`},
		{"empty map", record.NewMap(), `{}`},
		{"nil map", (*record.Map)(nil), `null`},
		{"map keeps order", record.NewMap("z", int64(1), "a\n", record.NewMap("x", false)), `{"z":1,"a\n":{"x":false}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := record.MarshalJSON(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("%s is not valid JSON", got)
			}
			// AppendJSON appends.
			got, err = record.AppendJSON([]byte("x"), tt.v)
			if err != nil || string(got) != "x"+tt.want {
				t.Errorf("AppendJSON = %s, %v", got, err)
			}
			if n, err := record.JSONLen(tt.v); err != nil || n != len(tt.want) {
				t.Errorf("JSONLen = %d, %v; want %d", n, err, len(tt.want))
			}
		})
	}
}

func TestAppendJSON_Errors(t *testing.T) {
	tests := []struct {
		name string
		v    any
	}{
		{"NaN", math.NaN()},
		{"+Inf", math.Inf(1)},
		{"-Inf", math.Inf(-1)},
		{"NaN in array", []any{int64(1), math.NaN()}},
		{"NaN in map", record.NewMap("a", math.Inf(1))},
		{"Go int", 1},
		{"Go map", map[string]any{}},
		{"Go float32", float32(1)},
		{"Number that is not a number", record.Number("abc")},
		{"empty Number", record.Number("")},
		{"Number NaN", record.Number("NaN")},
		{"Number with a plus", record.Number("+1")},
		{"Number with leading zero", record.Number("01")},
		{"Number with a trailing dot", record.Number("1.")},
		{"Number with space", record.Number("1 ")},
		{"Number hiding JSON", record.Number(`1,"x":2`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := record.MarshalJSON(tt.v)
			if !errors.Is(err, record.ErrUnsupported) {
				t.Errorf("got %s, %v; want ErrUnsupported", out, err)
			}
			if _, lerr := record.JSONLen(tt.v); lerr == nil || lerr.Error() != err.Error() {
				t.Errorf("JSONLen: %v; AppendJSON: %v", lerr, err)
			}
			out, err = record.MarshalMsgpack(tt.v)
			if !errors.Is(err, record.ErrUnsupported) {
				t.Errorf("msgpack: got % x, %v; want ErrUnsupported", out, err)
			}
		})
	}
}

// Floats encode as encoding/json encodes them.
func TestAppendJSON_FloatsMatchEncodingJSON(t *testing.T) {
	g := newGen(7)
	for range 20000 {
		f := g.float()
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := record.MarshalJSON(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%v: got %s, encoding/json %s", f, got, want)
		}
	}
}

// Strings read back through encoding/json as the same string.
func TestAppendJSONString(t *testing.T) {
	g := newGen(11)
	for range 20000 {
		s := g.string()
		out := record.AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q: %s: %v", s, out, err)
		}
		if back != s {
			t.Errorf("%q encodes as %s, which reads back as %q", s, out, back)
		}
		if n, _ := record.JSONLen(s); n != len(out) {
			t.Errorf("%q: JSONLen %d, encoded %d", s, n, len(out))
		}
	}
	// Long strings with a character to escape at every position.
	for _, c := range []string{"\"", "\\", "\n", "\x00", "é", "\xff"} {
		for n := range 40 {
			s := strings.Repeat("a", n) + c + strings.Repeat("b", 40-n)
			var back string
			out := record.AppendJSONString(nil, s)
			if err := json.Unmarshal(out, &back); err != nil {
				t.Fatal(err)
			}
			if l, _ := record.JSONLen(s); l != len(out) {
				t.Errorf("%q: JSONLen %d, encoded %d", s, l, len(out))
			}
			// Past the length at which the scan changes method.
			long := strings.Repeat(s, 10)
			if l, _ := record.JSONLen(long); l != len(record.AppendJSONString(nil, long)) {
				t.Errorf("%q x 10: JSONLen %d, encoded %d", s, l, len(record.AppendJSONString(nil, long)))
			}
			if want := strings.ToValidUTF8(s, "\ufffd"); back != want {
				t.Errorf("%q reads back as %q", s, back)
			}
		}
	}
}

func TestAppendMsgpack(t *testing.T) {
	str := func(n int) string { return strings.Repeat("s", n) }
	arr := func(n int) []any { return make([]any, n) }
	tests := []struct {
		name string
		v    any
		want string // hex of the head
	}{
		{"nil", nil, "c0"},
		{"false", false, "c2"},
		{"true", true, "c3"},
		{"0", int64(0), "00"},
		{"127", int64(127), "7f"},
		{"128", int64(128), "cc 80"},
		{"255", int64(255), "cc ff"},
		{"256", int64(256), "cd 01 00"},
		{"65535", int64(65535), "cd ff ff"},
		{"65536", int64(65536), "ce 00 01 00 00"},
		{"2^32-1", int64(math.MaxUint32), "ce ff ff ff ff"},
		{"2^32", int64(math.MaxUint32 + 1), "cf 00 00 00 01 00 00 00 00"},
		{"2^63-1", int64(math.MaxInt64), "cf 7f ff ff ff ff ff ff ff"},
		{"-1", int64(-1), "ff"},
		{"-32", int64(-32), "e0"},
		{"-33", int64(-33), "d0 df"},
		{"-128", int64(-128), "d0 80"},
		{"-129", int64(-129), "d1 ff 7f"},
		{"-32768", int64(-32768), "d1 80 00"},
		{"-32769", int64(-32769), "d2 ff ff 7f ff"},
		{"-2^31", int64(math.MinInt32), "d2 80 00 00 00"},
		{"-2^31-1", int64(math.MinInt32 - 1), "d3 ff ff ff ff 7f ff ff ff"},
		{"-2^63", int64(math.MinInt64), "d3 80 00 00 00 00 00 00 00"},
		{"uint64 small", uint64(5), "05"},
		{"uint64 max", uint64(math.MaxUint64), "cf ff ff ff ff ff ff ff ff"},
		{"float", 1.5, "cb 3f f8 00 00 00 00 00 00"},
		{"float -0", math.Copysign(0, -1), "cb 80 00 00 00 00 00 00 00"},
		{"Number 2.0", record.Number("2.0"), "02"},
		{"Number 1E2", record.Number("1E2"), "64"},
		{"Number -0", record.Number("-0"), "00"},
		{"Number 1.5", record.Number("1.5"), "cb 3f f8 00 00 00 00 00 00"},
		{"Number 0.1", record.Number("0.1"), "cb 3f b9 99 99 99 99 99 9a"},
		{"Number 2^64-1", record.Number("18446744073709551615"), "cf ff ff ff ff ff ff ff ff"},
		{"Number -2^63", record.Number("-9223372036854775808"), "d3 80 00 00 00 00 00 00 00"},
		{"Number 2^64+1 rounds", record.Number("18446744073709551617"), "cb 43 f0 00 00 00 00 00 00"},
		{"Number 1e-400 rounds", record.Number("1e-400"), "cb 00 00 00 00 00 00 00 00"},
		{"str 0", "", "a0"},
		{"str 31", str(31), "bf"},
		{"str 32", str(32), "d9 20"},
		{"str 255", str(255), "d9 ff"},
		{"str 256", str(256), "da 01 00"},
		{"str 65535", str(65535), "da ff ff"},
		{"str 65536", str(65536), "db 00 01 00 00"},
		{"str invalid UTF-8", "a\xff", "a4 61 ef bf bd"},
		{"array 0", arr(0), "90"},
		{"nil array", []any(nil), "90"},
		{"array 15", arr(15), "9f"},
		{"array 16", arr(16), "dc 00 10"},
		{"array 65535", arr(65535), "dc ff ff"},
		{"array 65536", arr(65536), "dd 00 01 00 00"},
		{"map 0", record.NewMap(), "80"},
		{"nil map", (*record.Map)(nil), "c0"},
		{"map keeps order", record.NewMap("b", int64(1), "a", nil), "82 a1 62 01 a1 61 c0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := record.MarshalMsgpack(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			want := hexBytes(t, tt.want)
			if !bytes.HasPrefix(got, want) {
				t.Errorf("got % x, want % x...", got[:min(len(got), 16)], want)
			}
			v, err := record.DecodeMsgpack(got)
			if err != nil {
				t.Fatalf("does not decode: %v", err)
			}
			want2, _ := record.MarshalMsgpack(v)
			if !bytes.Equal(got, want2) {
				t.Errorf("decodes to %s, which encodes differently", repr(v))
			}
		})
	}
	// Map headers of every size.
	for _, n := range []int{15, 16, 65535, 65536} {
		m := record.NewMap()
		for i := range n {
			m.Members = append(m.Members, record.Member{Key: strconv.Itoa(i), Value: nil})
		}
		got, err := record.MarshalMsgpack(m)
		if err != nil {
			t.Fatal(err)
		}
		want := record.AppendMsgpackMapLen(nil, n)
		if !bytes.HasPrefix(got, want) || len(want) != map[int]int{15: 1, 16: 3, 65535: 3, 65536: 5}[n] {
			t.Errorf("map of %d: head % x", n, got[:5])
		}
		v, err := record.DecodeMsgpack(got)
		if err != nil || v.(*record.Map).Len() != n {
			t.Errorf("map of %d decodes to %v", n, err)
		}
	}
	if got := record.AppendMsgpackArrayLen([]byte{1}, 3); !bytes.Equal(got, []byte{1, 0x93}) {
		t.Errorf("AppendMsgpackArrayLen appends % x", got)
	}
}

// Values the generator makes survive every pair of encoders and decoders,
// and other implementations read what we write the same way.
func TestRoundTrip_Random(t *testing.T) {
	for seed := range uint64(3000) {
		g := newGen(seed)
		g.lossless = true
		v := g.mapValue(4)

		js, err := record.MarshalJSON(v)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if n, err := record.JSONLen(v); err != nil || n != len(js) {
			t.Fatalf("seed %d: JSONLen %d, %v; encoded %d", seed, n, err, len(js))
		}
		back, err := record.Decode(js)
		if err != nil {
			t.Fatalf("seed %d: %s: %v", seed, js, err)
		}
		if !record.Equal(v, back) {
			t.Fatalf("seed %d: JSON round trip\n in %s\nout %s", seed, repr(v), repr(back))
		}
		js2, err := record.MarshalJSON(back)
		if err != nil || !bytes.Equal(js, js2) {
			t.Fatalf("seed %d: JSON encodes differently after decoding\n%s\n%s", seed, js, js2)
		}

		// encoding/json reads our JSON as the same structure.
		var std any
		d := json.NewDecoder(bytes.NewReader(js))
		d.UseNumber()
		if err := d.Decode(&std); err != nil {
			t.Fatalf("seed %d: encoding/json: %v\n%s", seed, err, js)
		}
		if !reflect.DeepEqual(plain(v), plain(std)) {
			t.Fatalf("seed %d: encoding/json reads\n%#v\nwe wrote\n%#v", seed, plain(std), plain(v))
		}

		mp, err := record.MarshalMsgpack(v)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		back, err = record.Decode(mp)
		if err != nil {
			t.Fatalf("seed %d: % x: %v", seed, mp, err)
		}
		if !record.Equal(v, back) {
			t.Fatalf("seed %d: msgpack round trip\n in %s\nout %s", seed, repr(v), repr(back))
		}

		// JSON in, msgpack, JSON out.
		mp2, err := record.MarshalMsgpack(mustDecode(t, js))
		if err != nil {
			t.Fatal(err)
		}
		js3, err := record.MarshalJSON(mustDecode(t, mp2))
		if err != nil {
			t.Fatal(err)
		}
		if !record.Equal(mustDecode(t, js3), v) {
			t.Fatalf("seed %d: JSON -> msgpack -> JSON\n in %s\nout %s", seed, js, js3)
		}
	}
}

func mustDecode(t *testing.T, b []byte) *record.Map {
	t.Helper()
	m, err := record.Decode(b)
	if err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return m
}

// JSON numbers of any size survive JSON, and survive msgpack as well as a
// float64 can hold them.
func TestRoundTrip_Numbers(t *testing.T) {
	g := newGen(3)
	for range 20000 {
		n := g.number()
		js := []byte(`{"n":` + string(n) + `}`)
		m := mustDecode(t, js)
		out, err := record.MarshalJSON(m)
		if err != nil || !bytes.Equal(out, js) {
			t.Fatalf("%s encodes back as %s, %v", js, out, err)
		}
		mp, err := record.MarshalMsgpack(m)
		if err != nil {
			if f, _ := record.Float(n); !math.IsInf(f, 0) {
				t.Fatalf("%s: %v", n, err)
			}
			continue
		}
		v, _ := mustDecode(t, mp).Get("n")
		if s, ok := record.IntegerString(n); ok && len(s) <= 20 && record.Equal(n, v) {
			continue // an integer that fits 64 bits stays exact
		}
		f, _ := record.Float(n)
		if !record.Equal(v, f) {
			t.Errorf("%s becomes %s in msgpack, want %v", n, repr(v), f)
		}
	}
}

func TestAppendMsgpack_ValidUTF8(t *testing.T) {
	for _, s := range []string{"\xff", "a\xc3", "\xed\xa0\x80", strings.Repeat("é", 20) + "\x80"} {
		out := record.AppendMsgpackString(nil, s)
		v, err := record.DecodeMsgpack(out)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if !utf8.ValidString(v.(string)) {
			t.Errorf("%q decodes to %q", s, v)
		}
		js, _ := record.MarshalJSON(s)
		var back string
		if err := json.Unmarshal(js, &back); err != nil || back != v {
			t.Errorf("%q: JSON gives %q, msgpack %q", s, back, v)
		}
	}
}
