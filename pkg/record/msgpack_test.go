package record_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/pkg/record"
)

func TestDecodeMsgpack_Values(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"nil", "c0", "null"},
		{"false", "c2", "false"},
		{"true", "c3", "true"},
		{"fixint 0", "00", "int64(0)"},
		{"fixint 127", "7f", "int64(127)"},
		{"negative fixint -1", "ff", "int64(-1)"},
		{"negative fixint -32", "e0", "int64(-32)"},
		{"uint8", "cc ff", "int64(255)"},
		{"uint16", "cd ff ff", "int64(65535)"},
		{"uint32", "ce ff ff ff ff", "int64(4294967295)"},
		{"uint64 in int64", "cf 7f ff ff ff ff ff ff ff", "int64(9223372036854775807)"},
		{"uint64 2^63", "cf 80 00 00 00 00 00 00 00", "uint64(9223372036854775808)"},
		{"uint64 max", "cf ff ff ff ff ff ff ff ff", "uint64(18446744073709551615)"},
		{"int8", "d0 80", "int64(-128)"},
		{"int8 positive", "d0 7f", "int64(127)"},
		{"int16", "d1 80 00", "int64(-32768)"},
		{"int32", "d2 80 00 00 00", "int64(-2147483648)"},
		{"int64 min", "d3 80 00 00 00 00 00 00 00", "int64(-9223372036854775808)"},
		{"int64 -1", "d3 ff ff ff ff ff ff ff ff", "int64(-1)"},
		{"float32", "ca 3f c0 00 00", "float64(1.5)"},
		{"float32 0.1", "ca 3d cc cc cd", "float64(0.10000000149011612)"},
		{"float64", "cb 3f b9 99 99 99 99 99 9a", "float64(0.1)"},
		{"float64 3.0", "cb 40 08 00 00 00 00 00 00", "float64(3)"},
		{"float64 -0", "cb 80 00 00 00 00 00 00 00", "float64(-0)"},
		{"fixstr empty", "a0", `""`},
		{"fixstr", "a3 61 62 63", `"abc"`},
		{"fixstr UTF-8", "a2 c3 a9", `"é"`},
		{"str8", "d9 01 61", `"a"`},
		{"str16", "da 00 01 61", `"a"`},
		{"str32", "db 00 00 00 01 61", `"a"`},
		{"bin8", "c4 03 01 02 03", `"AQID"`},
		{"bin8 empty", "c4 00", `""`},
		{"bin16", "c5 00 02 ff fe", `"//4="`},
		{"bin32", "c6 00 00 00 01 00", `"AA=="`},
		{"fixarray", "93 01 a1 61 c0", `[int64(1), "a", null]`},
		{"array16", "dc 00 02 c2 c3", `[false, true]`},
		{"array32", "dd 00 00 00 01 90", `[[]]`},
		{"fixmap", "82 a1 7a 01 a1 61 02", `{"z": int64(1), "a": int64(2)}`},
		{"map16", "de 00 01 a0 80", `{"": {}}`},
		{"map32", "df 00 00 00 01 a1 6b 90", `{"k": []}`},
		{"str8 key", "81 d9 01 6b 01", `{"k": int64(1)}`},
		{"duplicate keys", "83 a1 61 01 a1 62 02 a1 61 03", `{"a": int64(3), "b": int64(2)}`},
		{"timestamp 32", "d6 ff 00 00 00 00", `"1970-01-01T00:00:00.000000000Z"`},
		{"timestamp 32 max", "d6 ff ff ff ff ff", `"2106-02-07T06:28:15.000000000Z"`},
		{"timestamp 64", "d7 ff 1d 6f 34 54 5e 0b e1 00", `"2020-01-01T00:00:00.123456789Z"`},
		{"timestamp 64 high seconds", "d7 ff ee 6b 27 ff ff ff ff ff", `"2514-05-30T01:53:03.999999999Z"`},
		{"timestamp 96", "c7 0c ff 1d cd 65 00 ff ff ff ff ff ff ff ff", `"1969-12-31T23:59:59.500000000Z"`},
		{"timestamp 96 year 1", "c7 0c ff 00 00 00 00 ff ff ff f1 88 6e 09 00", `"0001-01-01T00:00:00.000000000Z"`},
		{"timestamp 96 year 0", "c7 0c ff 00 00 00 00 ff ff ff f1 86 8b 84 00", `"0000-01-01T00:00:00.000000000Z"`},
		{"timestamp 96 year 9999", "c7 0c ff 3b 9a c9 ff 00 00 00 3a ff f4 41 7f", `"9999-12-31T23:59:59.999999999Z"`},
		{"timestamp as value", "81 a2 61 74 d6 ff 00 00 00 01", `{"at": "1970-01-01T00:00:01.000000000Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := record.DecodeMsgpack(hexBytes(t, tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := repr(v); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// The three timestamp sizes decode like time.Unix, in UTC with nine
// fraction digits.
func TestDecodeMsgpack_Timestamps(t *testing.T) {
	tests := []struct {
		sec  int64
		nsec uint32
	}{
		{0, 0}, {1, 0}, {1764493212, 0}, {math.MaxUint32, 0},
		{1764493212, 1}, {1764493212, 999999999}, {1<<34 - 1, 5},
		{-1, 0}, {-1, 999999999}, {1 << 34, 0}, {253402300799, 999999999}, {-62135596800, 0},
	}
	for _, tt := range tests {
		var in []byte
		switch {
		case tt.sec >= 0 && tt.sec <= math.MaxUint32 && tt.nsec == 0:
			in = binary.BigEndian.AppendUint32([]byte{0xd6, 0xff}, uint32(tt.sec))
		case tt.sec >= 0 && tt.sec < 1<<34:
			in = binary.BigEndian.AppendUint64([]byte{0xd7, 0xff}, uint64(tt.nsec)<<34|uint64(tt.sec))
		default:
			in = binary.BigEndian.AppendUint32([]byte{0xc7, 12, 0xff}, tt.nsec)
			in = binary.BigEndian.AppendUint64(in, uint64(tt.sec))
		}
		v, err := record.DecodeMsgpack(in)
		if err != nil {
			t.Errorf("% x: %v", in, err)
			continue
		}
		want := time.Unix(tt.sec, int64(tt.nsec)).UTC().Format("2006-01-02T15:04:05.000000000Z")
		if v != want {
			t.Errorf("% x: got %s, want %s", in, repr(v), want)
		}
		if got, err := time.Parse(time.RFC3339Nano, v.(string)); err != nil || !got.Equal(time.Unix(tt.sec, int64(tt.nsec))) {
			t.Errorf("%s does not parse back as RFC 3339: %v %v", v, got, err)
		}
	}
}

func TestDecodeMsgpack_Errors(t *testing.T) {
	float32Bits := func(f float32) string {
		return hexDump(binary.BigEndian.AppendUint32([]byte{0xca}, math.Float32bits(f)))
	}
	float64Bits := func(f float64) string {
		return hexDump(binary.BigEndian.AppendUint64([]byte{0xcb}, math.Float64bits(f)))
	}
	tests := []struct {
		name string
		in   string
		err  error
		off  int
	}{
		{"empty", "", record.ErrEmpty, 0},
		{"never used byte", "c1", record.ErrSyntax, 0},
		{"never used byte in map", "81 a1 61 c1", record.ErrSyntax, 3},
		{"trailing bytes", "80 80", record.ErrSyntax, 1},
		{"trailing nil", "80 c0", record.ErrSyntax, 1},
		{"truncated uint16", "cd 01", record.ErrTruncated, 1},
		{"truncated str", "a3 61", record.ErrTruncated, 1},
		{"truncated map", "82 a1 61 01", record.ErrTruncated, -1},
		{"truncated array", "93 01 02", record.ErrTruncated, -1},
		{"truncated float64", "cb 00 00", record.ErrTruncated, 1},
		{"truncated ext header", "c7", record.ErrTruncated, 1},
		{"truncated ext type", "d6", record.ErrTruncated, 1},
		{"invalid UTF-8", "a1 ff", record.ErrInvalidUTF8, 1},
		{"invalid UTF-8 in str8", "d9 02 61 ff", record.ErrInvalidUTF8, 2},
		{"invalid UTF-8 in key", "81 a2 c3 28 01", record.ErrInvalidUTF8, 2},
		{"UTF-8 surrogate", "a3 ed a0 80", record.ErrInvalidUTF8, 1},
		{"cut UTF-8 sequence", "a1 c3", record.ErrInvalidUTF8, 1},
		{"integer key", "81 01 01", record.ErrUnsupported, 1},
		{"nil key", "81 c0 01", record.ErrUnsupported, 1},
		{"bool key", "81 c3 01", record.ErrUnsupported, 1},
		{"float key", "81 cb 3f f0 00 00 00 00 00 00 01", record.ErrUnsupported, 1},
		{"array key", "81 91 a1 61 01", record.ErrUnsupported, 1},
		{"map key", "81 80 01", record.ErrUnsupported, 1},
		{"bin key", "81 c4 01 61 01", record.ErrUnsupported, 1},
		{"timestamp key", "81 d6 ff 00 00 00 00 01", record.ErrUnsupported, 1},
		{"second key not a string", "82 a1 61 01 02 01", record.ErrUnsupported, 4},
		{"NaN", float64Bits(math.NaN()), record.ErrUnsupported, 0},
		{"+Inf", float64Bits(math.Inf(1)), record.ErrUnsupported, 0},
		{"-Inf", float64Bits(math.Inf(-1)), record.ErrUnsupported, 0},
		{"float32 NaN", float32Bits(float32(math.NaN())), record.ErrUnsupported, 0},
		{"float32 +Inf", float32Bits(float32(math.Inf(1))), record.ErrUnsupported, 0},
		{"NaN in map", "81 a1 6e " + float64Bits(math.NaN()), record.ErrUnsupported, 3},
		{"fixext1", "d4 01 00", record.ErrUnsupported, 0},
		{"fixext2", "d5 02 00 00", record.ErrUnsupported, 0},
		{"fixext4 type 0", "d6 00 00 00 00 00", record.ErrUnsupported, 0},
		{"fixext8 type -2", "d7 fe 00 00 00 00 00 00 00 00", record.ErrUnsupported, 0},
		{"fixext16", "d8 05" + strings.Repeat(" 00", 16), record.ErrUnsupported, 0},
		{"ext8 empty", "c7 00 05", record.ErrUnsupported, 0},
		{"ext16", "c8 00 01 7f 00", record.ErrUnsupported, 0},
		{"ext32", "c9 00 00 00 01 80 00", record.ErrUnsupported, 0},
		{"ext in map", "81 a1 65 d4 01 00", record.ErrUnsupported, 3},
		{"timestamp of 1 byte", "d4 ff 00", record.ErrSyntax, 0},
		{"timestamp of 16 bytes", "d8 ff" + strings.Repeat(" 00", 16), record.ErrSyntax, 0},
		{"timestamp of 0 bytes", "c7 00 ff", record.ErrSyntax, 0},
		{"timestamp 64 nanoseconds too large", "d7 ff ee 6b 28 00 00 00 00 00", record.ErrSyntax, 0},
		{"timestamp 64 nanoseconds max", "d7 ff ff ff ff ff ff ff ff ff", record.ErrSyntax, 0},
		{"timestamp 96 nanoseconds too large", "c7 0c ff 3b 9a ca 00 00 00 00 00 00 00 00 00", record.ErrSyntax, 0},
		{"timestamp 96 year 10000", "c7 0c ff 00 00 00 00 00 00 00 3a ff f4 41 80", record.ErrUnsupported, 0},
		{"timestamp 96 year -1", "c7 0c ff 3b 9a c9 ff ff ff ff f1 86 8b 83 ff", record.ErrUnsupported, 0},
		{"timestamp 96 max seconds", "c7 0c ff 00 00 00 00 7f ff ff ff ff ff ff ff", record.ErrUnsupported, 0},
		{"timestamp 96 min seconds", "c7 0c ff 00 00 00 00 80 00 00 00 00 00 00 00", record.ErrUnsupported, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := record.DecodeMsgpack(hexBytes(t, tt.in))
			if err == nil {
				t.Fatalf("decoded %s", repr(v))
			}
			checkDecodeError(t, err, "msgpack", tt.err, tt.off)
		})
	}
}

func hexDump(b []byte) string {
	const digits = "0123456789abcdef"
	var s strings.Builder
	for i, c := range b {
		if i > 0 {
			s.WriteByte(' ')
		}
		s.WriteByte(digits[c>>4])
		s.WriteByte(digits[c&15])
	}
	return s.String()
}

// msgpackSamples are the JSON samples in msgpack, plus the types JSON
// lacks.
func msgpackSamples(t *testing.T) [][]byte {
	t.Helper()
	var out [][]byte
	for _, s := range jsonSamples {
		v, err := record.DecodeJSON([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		b, err := record.MarshalMsgpack(v)
		if err != nil {
			continue // a number beyond float64
		}
		out = append(out, b)
	}
	out = append(out,
		hexBytes(t, "84 a1 74 d6 ff 00 00 00 01 a1 62 c4 03 01 02 03 a1 66 cb 3f b9 99 99 99 99 99 9a a1 75 cf ff ff ff ff ff ff ff ff"),
		hexBytes(t, "82 a2 74 38 d7 ff 1d 6f 34 54 5e 0b e1 00 a3 74 39 36 c7 0c ff 1d cd 65 00 ff ff ff ff ff ff ff ff"),
		hexBytes(t, "de 00 02 a1 61 dc 00 01 ca 3f c0 00 00 d9 01 62 dd 00 00 00 01 df 00 00 00 00"),
	)
	return out
}

// Every proper prefix of a msgpack record is truncated input.
func TestDecodeMsgpack_Truncated(t *testing.T) {
	for _, s := range msgpackSamples(t) {
		if _, err := record.Decode(s); err != nil {
			t.Fatalf("sample % x: %v", s, err)
		}
		for i := 1; i < len(s); i++ {
			_, err := record.DecodeMsgpack(s[:i])
			checkDecodeError(t, err, "msgpack", record.ErrTruncated, -1)
			_, err = record.Decode(s[:i])
			checkDecodeError(t, err, "msgpack", record.ErrTruncated, -1)
		}
	}
}

func TestDecodeMsgpack_Depth(t *testing.T) {
	nest := func(head string, levels int) []byte {
		b := bytes.Repeat(hexBytes(t, head), levels)
		return append(b, 0xc0)
	}
	shapes := []struct{ head string }{
		{"91"},                // fixarray of one
		{"81 a1 61"},          // fixmap {"a": ...}
		{"dc 00 01"},          // array16
		{"df 00 00 00 01 a0"}, // map32 {"": ...}
	}
	for _, limit := range []int{1, 2, 5, record.DefaultMaxDepth} {
		d := record.Decoder{MaxDepth: limit}
		for _, s := range shapes {
			if _, err := d.DecodeMsgpack(nest(s.head, limit)); err != nil {
				t.Errorf("limit %d, %d levels of %s: %v", limit, limit, s.head, err)
			}
			_, err := d.DecodeMsgpack(nest(s.head, limit+1))
			checkDecodeError(t, err, "msgpack", record.ErrTooDeep, limit*len(hexBytes(t, s.head)))
		}
	}
	if _, err := record.DecodeMsgpack(nest("91", record.DefaultMaxDepth)); err != nil {
		t.Errorf("%d levels: %v", record.DefaultMaxDepth, err)
	}
	for _, s := range shapes {
		deep := nest(s.head, 100000)
		_, err := record.DecodeMsgpack(deep)
		checkDecodeError(t, err, "msgpack", record.ErrTooDeep, record.DefaultMaxDepth*len(hexBytes(t, s.head)))
		_, err = record.Decode(deep)
		checkDecodeError(t, err, "msgpack", record.ErrTooDeep, -1)
	}
}

func TestDecodeMsgpack_TooLarge(t *testing.T) {
	in := hexBytes(t, "81 a1 61 a3 61 62 63")
	if _, err := (record.Decoder{MaxBytes: len(in)}).DecodeMsgpack(in); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	_, err := record.Decoder{MaxBytes: len(in) - 1}.DecodeMsgpack(in)
	checkDecodeError(t, err, "msgpack", record.ErrTooLarge, len(in)-1)
	_, err = record.Decoder{MaxBytes: len(in) - 1}.Decode(in)
	checkDecodeError(t, err, "msgpack", record.ErrTooLarge, len(in)-1)
}

// A length field that promises more than the input holds fails at once,
// without allocating for the promise.
func TestDecodeMsgpack_HostileLengths(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"array32", "dd ff ff ff ff 01 02"},
		{"map32", "df ff ff ff ff a1 61 01"},
		{"str32", "db ff ff ff ff 61"},
		{"bin32", "c6 ff ff ff ff 00"},
		{"ext32", "c9 ff ff ff ff ff 00"},
		{"array16", "dc ff ff 01"},
		{"map16", "de ff ff 01"},
		{"array32 in map", "81 a1 61 dd 7f ff ff ff 01"},
		{"map32 key", "81 db ff ff ff ff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := hexBytes(t, tt.in)
			_, err := record.DecodeMsgpack(in)
			checkDecodeError(t, err, "msgpack", record.ErrTruncated, -1)
			allocs := testing.AllocsPerRun(10, func() { _, _ = record.DecodeMsgpack(in) })
			if allocs > 8 {
				t.Errorf("%v allocations for %d bytes of input", allocs, len(in))
			}
		})
	}
}

// Nested arrays that each declare as many elements as there are bytes
// left must not make the decoder allocate for every level's promise.
func TestDecodeMsgpack_NestedPromises(t *testing.T) {
	const size = 1 << 20
	const levels = 100
	var in []byte
	for range levels {
		in = binary.BigEndian.AppendUint32(append(in, 0xdd), uint32(size-len(in)-5))
	}
	in = append(in, make([]byte, size-len(in))...) // fixint zeros
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := record.DecodeMsgpack(in)
	runtime.ReadMemStats(&after)
	checkDecodeError(t, err, "msgpack", record.ErrTruncated, -1)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64*size {
		t.Errorf("allocated %d MB decoding %d MB", alloc>>20, size>>20)
	}
}

func TestDecodeMsgpack_ManyKeys(t *testing.T) {
	// 300 distinct keys, then every third one again with a new value.
	const n = 300
	in := record.AppendMsgpackMapLen(nil, n+n/3)
	for i := range n {
		in = record.AppendMsgpackString(in, "k"+string(rune('a'+i%26))+strings.Repeat("x", i/26))
		in = record.AppendMsgpackInt(in, int64(i))
	}
	for i := 0; i < n; i += 3 {
		in = record.AppendMsgpackString(in, "k"+string(rune('a'+i%26))+strings.Repeat("x", i/26))
		in = record.AppendMsgpackInt(in, int64(-i))
	}
	v, err := record.DecodeMsgpack(in)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(*record.Map)
	if m.Len() != n {
		t.Fatalf("%d members, want %d", m.Len(), n)
	}
	for i, mem := range m.Members {
		want := int64(i)
		if i%3 == 0 {
			want = int64(-i)
		}
		if mem.Value != want {
			t.Errorf("member %d %q = %s, want %d", i, mem.Key, repr(mem.Value), want)
		}
	}
}
