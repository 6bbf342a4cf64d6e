package record_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/pkg/record"
)

// repr spells a record value with its Go representation, so that tests can
// tell int64(2) from Number("2") and see the order of map keys.
func repr(v any) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func writeRepr(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		b.WriteString(strconv.Quote(x))
	case int64:
		fmt.Fprintf(b, "int64(%d)", x)
	case uint64:
		fmt.Fprintf(b, "uint64(%d)", x)
	case float64:
		fmt.Fprintf(b, "float64(%s)", strconv.FormatFloat(x, 'g', -1, 64))
	case record.Number:
		fmt.Fprintf(b, "Number(%s)", string(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e)
		}
		b.WriteByte(']')
	case *record.Map:
		b.WriteByte('{')
		for i, m := range x.Members {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Quote(m.Key))
			b.WriteString(": ")
			writeRepr(b, m.Value)
		}
		b.WriteByte('}')
	default:
		fmt.Fprintf(b, "%T(%v)", v, v)
	}
}

// checkDecodeError fails unless err is a *record.DecodeError of the given
// format wrapping want, at byte offset off (any offset when off < 0).
func checkDecodeError(t *testing.T, err error, format string, want error, off int) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("error %q is not %v", err, want)
	}
	var de *record.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %q (%T) is not a *record.DecodeError", err, err)
	}
	if de.Format != format {
		t.Errorf("error %q: format %q, want %q", err, de.Format, format)
	}
	if off >= 0 && de.Offset != off {
		t.Errorf("error %q: offset %d, want %d", err, de.Offset, off)
	}
}

// hexBytes reads a space-separated hex dump such as "81 a1 61 01".
func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	var out []byte
	for f := range strings.FieldsSeq(s) {
		n, err := strconv.ParseUint(f, 16, 8)
		if err != nil {
			t.Fatalf("bad hex %q in %q", f, s)
		}
		out = append(out, byte(n))
	}
	return out
}

// gen makes random record values for property tests.
type gen struct {
	r *rand.Rand
	// floats allows float64 values, which only msgpack produces.
	floats bool
	// numbers allows Number literals; lossless keeps them to values a
	// float64 or a 64-bit integer holds exactly, so they survive msgpack.
	numbers, lossless bool
}

func newGen(seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), floats: true, numbers: true}
}

func (g *gen) value(depth int) any {
	n := 9
	if depth <= 0 {
		n = 7
	}
	switch g.r.IntN(n) {
	case 0:
		return nil
	case 1:
		return g.r.IntN(2) == 0
	case 2:
		return g.string()
	case 3:
		return g.int()
	case 4:
		if g.floats {
			return g.float()
		}
		return g.int()
	case 5:
		if g.numbers {
			return g.number()
		}
		return g.string()
	case 6:
		if g.r.IntN(4) == 0 {
			return uint64(math.MaxInt64) + 1 + g.r.Uint64N(math.MaxInt64)
		}
		return g.string()
	case 7:
		a := make([]any, g.r.IntN(6))
		for i := range a {
			a[i] = g.value(depth - 1)
		}
		return a
	default:
		return g.mapValue(depth - 1)
	}
}

func (g *gen) mapValue(depth int) *record.Map {
	m := record.NewMap()
	for range g.r.IntN(7) {
		m.Set(g.string(), g.value(depth))
	}
	return m
}

var genRunes = []rune{'a', 'z', '0', ' ', '"', '\\', '/', '\n', '\t', 0, 0x1f, 0x7f, 'é', '€', 0x2028, 0xfffd, '😀', 0x10ffff}

func (g *gen) string() string {
	if g.r.IntN(3) == 0 {
		return []string{"", "role", "content", "type", "text", "toolCall", "id", "a"}[g.r.IntN(8)]
	}
	var b strings.Builder
	for range g.r.IntN(40) {
		if g.r.IntN(3) == 0 {
			b.WriteRune(genRunes[g.r.IntN(len(genRunes))])
		} else {
			b.WriteByte(byte('a' + g.r.IntN(26)))
		}
	}
	return b.String()
}

func (g *gen) int() int64 {
	switch g.r.IntN(6) {
	case 0:
		return int64(g.r.IntN(256)) - 128
	case 1:
		return []int64{0, -1, -32, -33, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1,
			math.MinInt8, math.MinInt8 - 1, math.MinInt16, math.MinInt16 - 1, math.MinInt32, math.MinInt32 - 1,
			math.MaxInt64, math.MinInt64, 1<<53 + 1}[g.r.IntN(21)]
	default:
		return int64(g.r.Uint64()) >> g.r.IntN(64)
	}
}

func (g *gen) float() float64 {
	switch g.r.IntN(5) {
	case 0:
		return []float64{0, math.Copysign(0, -1), 0.1, 1e-7, 1e21, 1e300, 5e-324, math.MaxFloat64, -1.5, 3, 1 << 63}[g.r.IntN(11)]
	case 1:
		return float64(g.r.IntN(2000) - 1000)
	case 2:
		return float64(float32(g.r.NormFloat64()))
	default:
		for {
			f := math.Float64frombits(g.r.Uint64())
			if !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f
			}
		}
	}
}

func (g *gen) number() record.Number {
	if g.lossless {
		switch g.r.IntN(3) {
		case 0:
			return record.Number(strconv.FormatFloat(g.float(), 'g', -1, 64))
		case 1:
			return record.Number(strconv.FormatFloat(g.float(), 'E', -1, 64))
		default:
			return record.Number([]string{"-0", "2.0", "1E1", "10e-1", "-0.0", "0.5", "18446744073709551615", "9223372036854775808"}[g.r.IntN(8)])
		}
	}
	switch g.r.IntN(3) {
	case 0:
		return record.Number([]string{"-0", "2.0", "1E1", "10e-1", "1.5", "1e-1", "-0.0", "1E400", "18446744073709551617",
			"9007199254740993.0", "123456789012345678901234567890", "0.1000000000000000055511151231257827021181583404541015625",
			"1e-400", "-1.25E+3"}[g.r.IntN(14)])
	default:
		var b strings.Builder
		if g.r.IntN(2) == 0 {
			b.WriteByte('-')
		}
		if g.r.IntN(4) == 0 {
			b.WriteByte('0')
		} else {
			b.WriteByte(byte('1' + g.r.IntN(9)))
			for range g.r.IntN(25) {
				b.WriteByte(byte('0' + g.r.IntN(10)))
			}
		}
		if g.r.IntN(2) == 0 {
			b.WriteByte('.')
			for range 1 + g.r.IntN(20) {
				b.WriteByte(byte('0' + g.r.IntN(10)))
			}
		}
		if b.Len() < 3 || g.r.IntN(2) == 0 {
			b.WriteString([]string{"e", "E", "e+", "e-", "E-"}[g.r.IntN(5)])
			b.WriteString(strconv.Itoa(g.r.IntN(40)))
		}
		return record.Number(b.String())
	}
}

// plain turns a value into a tree of string, bool, nil, []any and
// map[string]any, with every number spelled as its exact decimal value
// (a float64 as the decimal its shortest form spells), so that values from
// different decoders compare with reflect.DeepEqual.
func plain(v any) any {
	switch x := v.(type) {
	case nil, bool, string:
		return x
	case int64, int8, int16, int32, int:
		return "#" + fmt.Sprint(x)
	case uint64, uint8, uint16, uint32, uint:
		return "#" + fmt.Sprint(x)
	case float32:
		return plain(float64(x))
	case float64:
		return plainDecimal(strconv.FormatFloat(x, 'g', -1, 64))
	case record.Number:
		return plainDecimal(string(x))
	case json.Number:
		return plainDecimal(string(x))
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case time.Time:
		return record.FormatTime(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = plain(e)
		}
		return out
	case *record.Map:
		out := make(map[string]any, x.Len())
		for _, m := range x.Members {
			out[m.Key] = plain(m.Value)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = plain(e)
		}
		return out
	}
	return fmt.Sprintf("unexpected %T", v)
}

func plainDecimal(s string) string {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "bad number " + s
	}
	return "#" + r.RatString()
}
