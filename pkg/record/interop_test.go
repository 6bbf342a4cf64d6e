package record_test

import (
	"bytes"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/ctxd/ctxd/pkg/record"
)

// decodeVmihailenco reads msgpack with github.com/vmihailenco/msgpack/v5.
func decodeVmihailenco(t *testing.T, b []byte) any {
	t.Helper()
	d := msgpack.NewDecoder(bytes.NewReader(b))
	v, err := d.DecodeInterface()
	if err != nil {
		t.Fatalf("vmihailenco/msgpack: %v\n% x", err, b)
	}
	return v
}

// Our msgpack reads back the same in another implementation.
func TestMsgpack_ReadByVmihailenco(t *testing.T) {
	for seed := range uint64(3000) {
		g := newGen(seed)
		g.lossless = true
		v := g.mapValue(4)
		b, err := record.MarshalMsgpack(v)
		if err != nil {
			t.Fatal(err)
		}
		theirs := decodeVmihailenco(t, b)
		// A Number becomes an integer or a float64 in msgpack: compare
		// with what our own decoder reads.
		ours, err := record.DecodeMsgpack(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(plain(ours), plain(theirs)) {
			t.Fatalf("seed %d:\nours   %#v\ntheirs %#v", seed, plain(ours), plain(theirs))
		}
		if !record.Equal(v, ours) {
			t.Fatalf("seed %d: %s reads back as %s", seed, repr(v), repr(ours))
		}
	}
}

// goGen makes random Go values of the kinds vmihailenco/msgpack encodes.
type goGen struct{ *gen }

func (g goGen) value(depth int) any {
	n := 16
	if depth <= 0 {
		n = 14
	}
	r := g.r
	switch r.IntN(n) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return g.string()
	case 3:
		return g.int()
	case 4:
		return int8(g.int())
	case 5:
		return int16(g.int())
	case 6:
		return int32(g.int())
	case 7:
		return uint8(g.int())
	case 8:
		return uint64(g.int()) >> r.IntN(64)
	case 9:
		return uint32(g.int())
	case 10:
		return g.float()
	case 11:
		f := float32(g.float())
		if math.IsInf(float64(f), 0) {
			f = math.MaxFloat32
		}
		return f
	case 12:
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	case 13:
		switch r.IntN(3) {
		case 0: // 32-bit seconds
			return time.Unix(r.Int64N(math.MaxUint32), 0).UTC()
		case 1: // 34-bit seconds and nanoseconds
			return time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).UTC()
		default: // 64-bit seconds, within years 0 to 9999
			return time.Unix(r.Int64N(253402300800+62167219200)-62167219200, r.Int64N(1e9)).UTC()
		}
	case 14:
		a := make([]any, r.IntN(6))
		for i := range a {
			a[i] = g.value(depth - 1)
		}
		return a
	default:
		return g.mapValue(depth - 1)
	}
}

func (g goGen) mapValue(depth int) map[string]any {
	m := map[string]any{}
	for range g.r.IntN(7) {
		m[g.string()] = g.value(depth)
	}
	return m
}

// We read what another implementation writes, whatever encodings it
// picks.
func TestMsgpack_WrittenByVmihailenco(t *testing.T) {
	for seed := range uint64(3000) {
		g := goGen{newGen(seed)}
		v := g.mapValue(4)
		var buf bytes.Buffer
		e := msgpack.NewEncoder(&buf)
		e.UseCompactInts(seed%2 == 0)
		e.UseCompactFloats(seed%3 == 0)
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
		ours, err := record.Decode(buf.Bytes())
		if err != nil {
			t.Fatalf("seed %d: %v\n% x", seed, err, buf.Bytes())
		}
		want := any(v)
		if seed%3 == 0 {
			want = compactFloats(v)
		}
		if !reflect.DeepEqual(plain(ours), plain(want)) {
			t.Fatalf("seed %d:\nours   %#v\ntheirs %#v", seed, plain(ours), plain(want))
		}
	}
}

// compactFloats turns whole floats that fit an int64 into int64, as
// an encoder with UseCompactFloats writes them.
func compactFloats(v any) any {
	switch x := v.(type) {
	case float32:
		return compactFloats(float64(x))
	case float64:
		if x == math.Trunc(x) && x >= math.MinInt64 && x < math.MaxInt64 {
			return int64(x)
		}
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = compactFloats(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = compactFloats(e)
		}
		return out
	}
	return v
}
