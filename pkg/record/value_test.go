package record_test

import (
	"math"
	"testing"
	"time"

	"github.com/ctxd/ctxd/pkg/record"
)

// jsonValue decodes a JSON literal for tables.
func jsonValue(t *testing.T, s string) any {
	t.Helper()
	v, err := record.DecodeJSON([]byte(s))
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

func TestIsInteger(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string // IntegerString, "" when v is not spelled out
		is   bool   // IsInteger
	}{
		{"2", record.Number("2"), "2", true},
		{"2.0", record.Number("2.0"), "2", true},
		{"1E1", record.Number("1E1"), "10", true},
		{"1e+2", record.Number("1e+2"), "100", true},
		{"1.5", record.Number("1.5"), "", false},
		{"1e-1", record.Number("1e-1"), "", false},
		{"10e-1", record.Number("10e-1"), "1", true},
		{"1.50e1", record.Number("1.50e1"), "15", true},
		{"-0.0", record.Number("-0.0"), "0", true},
		{"-0", record.Number("-0"), "0", true},
		{"0e-5", record.Number("0e-5"), "0", true},
		{"-12.000", record.Number("-12.000"), "-12", true},
		{"-1.2e1", record.Number("-1.2e1"), "-12", true},
		{"1E400", record.Number("1E400"), "1" + zeros(400), true},
		{"18446744073709551617", record.Number("18446744073709551617"), "18446744073709551617", true},
		{"1E999999999 is an integer too long to spell", record.Number("1E999999999"), "", true},
		{"1E-999999999", record.Number("1E-999999999"), "", false},
		{"huge exponent", record.Number("1E99999999999999999999999"), "", true},
		{"huge negative exponent", record.Number("1E-99999999999999999999999"), "", false},
		{"0E99999999999999999999999", record.Number("0E99999999999999999999999"), "0", true},
		{"not a number", record.Number("abc"), "", false},
		{"empty Number", record.Number(""), "", false},
		{"int64", int64(-7), "-7", true},
		{"int64 min", int64(math.MinInt64), "-9223372036854775808", true},
		{"uint64 max", uint64(math.MaxUint64), "18446744073709551615", true},
		{"float 3.0", 3.0, "3", true},
		{"float -0", math.Copysign(0, -1), "0", true},
		{"float 2^53", float64(1 << 53), "9007199254740992", true},
		{"float 0.5", 0.5, "", false},
		{"float32 1.5", float64(float32(1.5)), "", false},
		{"float32 16777216", float64(float32(16777216)), "16777216", true},
		{"float32 0.1", float64(float32(0.1)), "", false},
		// A float stands for the decimal its shortest form spells, the
		// form JSON encoders write.
		{"float 2^63", float64(1 << 63), "9223372036854776000", true},
		{"float 1e21", 1e21, "1000000000000000000000", true},
		{"float 1e23", 1e23, "1" + zeros(23), true},
		{"float NaN", math.NaN(), "", false},
		{"float +Inf", math.Inf(1), "", false},
		{"string", "2", "", false},
		{"bool", true, "", false},
		{"nil", nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := record.IsInteger(tt.v); got != tt.is {
				t.Errorf("IsInteger(%s) = %v, want %v", repr(tt.v), got, tt.is)
			}
			got, ok := record.IntegerString(tt.v)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("IntegerString(%s) = %q, %v; want %q", repr(tt.v), got, ok, tt.want)
			}
		})
	}
	// Decoded values: JSON integers and msgpack whole floats.
	for _, s := range []string{"2", "2.0", "1E1", "-0.0"} {
		if !record.IsInteger(jsonValue(t, s)) {
			t.Errorf("IsInteger(%s) = false", s)
		}
	}
	v, err := record.DecodeMsgpack([]byte{0xcb, 0x40, 0x08, 0, 0, 0, 0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := record.IntegerString(v); s != "3" || !ok {
		t.Errorf("IntegerString(msgpack 3.0) = %q, %v", s, ok)
	}
}

func zeros(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = '0'
	}
	return string(b)
}

func TestEqual(t *testing.T) {
	m := func(kv ...any) *record.Map { return record.NewMap(kv...) }
	tests := []struct {
		name string
		a, b any
		want bool
	}{
		{"nil", nil, nil, true},
		{"nil and false", nil, false, false},
		{"bools", true, true, true},
		{"different bools", true, false, false},
		{"strings", "a", "a", true},
		{"different strings", "a", "b", false},
		{"string and number", "1", int64(1), false},
		{"int64", int64(5), int64(5), true},
		{"int64 and uint64", int64(5), uint64(5), true},
		{"int64 and Number", int64(2), record.Number("2.0"), true},
		{"int64 and 2E0", int64(2), record.Number("2E0"), true},
		{"int64 and 20e-1", int64(2), record.Number("20e-1"), true},
		{"Number spellings", record.Number("1E1"), record.Number("10.00"), true},
		{"2^53 and 2^53+1", int64(1 << 53), record.Number("9007199254740993"), false},
		{"2^53+1 as Number and int64", record.Number("9007199254740993"), int64(1<<53 + 1), true},
		{"2^63-1 and its float", int64(math.MaxInt64), float64(math.MaxInt64), false},
		{"uint64 max", uint64(math.MaxUint64), record.Number("18446744073709551615"), true},
		{"uint64 max and +1", uint64(math.MaxUint64), record.Number("18446744073709551616"), false},
		{"int64 min", int64(math.MinInt64), record.Number("-9223372036854775808"), true},
		{"float and int", 3.0, int64(3), true},
		{"float and Number", 0.1, record.Number("0.1"), true},
		{"float and its exact value", 0.1, record.Number("0.1000000000000000055511151231257827021181583404541015625"), false},
		{"float 2^63 and its JSON form", float64(1 << 63), record.Number("9223372036854776000"), true},
		{"float 1e21 and its JSON form", 1e21, record.Number("1e+21"), true},
		{"float and float", 1.5, 1.5, true},
		{"different floats", 1.5, 2.5, false},
		{"zero and minus zero", int64(0), record.Number("-0"), true},
		{"float minus zero", math.Copysign(0, -1), int64(0), true},
		{"minus zeros", record.Number("-0.0e5"), record.Number("0"), true},
		{"negative and positive", record.Number("-1"), int64(1), false},
		{"huge exponents", record.Number("1E99999"), record.Number("10E99998"), true},
		{"different huge exponents", record.Number("1E99999"), record.Number("1E99998"), false},
		{"huge and small", record.Number("1E400"), 1e300, false},
		{"tiny", record.Number("1e-400"), int64(0), false},
		{"number and string", int64(1), "1", false},
		{"arrays", []any{int64(1), "a"}, []any{record.Number("1.0"), "a"}, true},
		{"array order", []any{int64(1), "a"}, []any{"a", int64(1)}, false},
		{"array lengths", []any{int64(1)}, []any{int64(1), int64(1)}, false},
		{"empty arrays", []any{}, []any{}, true},
		{"array and map", []any{}, m(), false},
		{"maps in another order", m("a", int64(1), "b", "x"), m("b", "x", "a", record.Number("1")), true},
		{"maps with another value", m("a", int64(1)), m("a", int64(2)), false},
		{"maps with another key", m("a", int64(1)), m("b", int64(1)), false},
		{"map with an extra key", m("a", int64(1)), m("a", int64(1), "b", nil), false},
		{"null member and absent member", m("a", nil), m("b", nil), false},
		{"nested", m("a", []any{m("b", 1.0)}), m("a", []any{m("b", int64(1))}), true},
		{"empty maps", m(), m(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := record.Equal(tt.a, tt.b); got != tt.want {
				t.Errorf("Equal(%s, %s) = %v, want %v", repr(tt.a), repr(tt.b), got, tt.want)
			}
			if got := record.Equal(tt.b, tt.a); got != tt.want {
				t.Errorf("Equal(%s, %s) = %v, want %v", repr(tt.b), repr(tt.a), got, tt.want)
			}
		})
	}
}

func TestFloat(t *testing.T) {
	tests := []struct {
		v    any
		want float64
		ok   bool
	}{
		{int64(-3), -3, true},
		{uint64(math.MaxUint64), math.MaxUint64, true},
		{1.5, 1.5, true},
		{record.Number("0.1"), 0.1, true},
		{record.Number("9007199254740993"), 1 << 53, true},
		{record.Number("1E400"), math.Inf(1), true},
		{record.Number("-1E400"), math.Inf(-1), true},
		{record.Number("1e-400"), 0, true},
		{record.Number("NaN"), 0, false},
		{record.Number("Inf"), 0, false},
		{record.Number("0x10"), 0, false},
		{record.Number("1_000"), 0, false},
		{"1", 0, false},
		{nil, 0, false},
	}
	for _, tt := range tests {
		got, ok := record.Float(tt.v)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Float(%s) = %v, %v; want %v, %v", repr(tt.v), got, ok, tt.want, tt.ok)
		}
	}
}

func TestTypeName(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{nil, "null"}, {true, "boolean"}, {"s", "string"}, {int64(1), "number"}, {uint64(1), "number"},
		{1.5, "number"}, {record.Number("1.5"), "number"}, {[]any{}, "array"}, {record.NewMap(), "map"},
		{int(1), "unknown"}, {map[string]any{}, "unknown"},
	}
	for _, tt := range tests {
		if got := record.TypeName(tt.v); got != tt.want {
			t.Errorf("TypeName(%#v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestIsTrue(t *testing.T) {
	for _, v := range []any{false, nil, "true", int64(1), record.Number("1"), []any{true}, record.NewMap()} {
		if record.IsTrue(v) {
			t.Errorf("IsTrue(%s) = true", repr(v))
		}
	}
	if !record.IsTrue(true) {
		t.Error("IsTrue(true) = false")
	}
}

func TestIsNumber(t *testing.T) {
	for _, v := range []any{int64(1), uint64(1), 1.5, record.Number("1e5")} {
		if !record.IsNumber(v) {
			t.Errorf("IsNumber(%s) = false", repr(v))
		}
	}
	for _, v := range []any{nil, "1", true, []any{}, int(1)} {
		if record.IsNumber(v) {
			t.Errorf("IsNumber(%#v) = true", v)
		}
	}
}

func TestMap(t *testing.T) {
	m := record.NewMap("b", int64(1), "a", "x")
	if got := repr(m); got != `{"b": int64(1), "a": "x"}` {
		t.Fatalf("NewMap: %s", got)
	}
	if m.Len() != 2 {
		t.Errorf("Len = %d", m.Len())
	}
	if v, ok := m.Get("a"); v != "x" || !ok {
		t.Errorf(`Get("a") = %v, %v`, v, ok)
	}
	if v, ok := m.Get("c"); v != nil || ok {
		t.Errorf(`Get("c") = %v, %v`, v, ok)
	}
	if s, ok := m.String("a"); s != "x" || !ok {
		t.Errorf(`String("a") = %q, %v`, s, ok)
	}
	if s, ok := m.String("b"); s != "" || ok {
		t.Errorf(`String("b") = %q, %v`, s, ok)
	}
	c := m.Clone()
	m.Set("b", int64(2)) // keeps its position
	m.Set("c", nil)      // appended
	if got := repr(m); got != `{"b": int64(2), "a": "x", "c": null}` {
		t.Errorf("after Set: %s", got)
	}
	if got := repr(c); got != `{"b": int64(1), "a": "x"}` {
		t.Errorf("clone changed: %s", got)
	}
	if got := repr(record.NewMap("a", 1.5, "a", nil)); got != `{"a": null}` {
		t.Errorf("NewMap with a repeated key: %s", got)
	}

	// A nil map reads as empty.
	var nilMap *record.Map
	if nilMap.Len() != 0 {
		t.Error("nil Len")
	}
	if _, ok := nilMap.Get("a"); ok {
		t.Error("nil Get")
	}
	if _, ok := nilMap.String("a"); ok {
		t.Error("nil String")
	}

	for _, kv := range [][]any{{"a"}, {1, 2}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewMap(%v) did not panic", kv)
				}
			}()
			record.NewMap(kv...)
		}()
	}
}

func TestFormatTime(t *testing.T) {
	tests := []struct {
		t    time.Time
		want string
	}{
		{time.Unix(0, 0), "1970-01-01T00:00:00.000000000Z"},
		{time.Date(2025, 11, 30, 10, 0, 0, 5, time.FixedZone("CET", 3600)), "2025-11-30T09:00:00.000000005Z"},
		{time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), "9999-12-31T23:59:59.999999999Z"},
	}
	for _, tt := range tests {
		if got := record.FormatTime(tt.t); got != tt.want {
			t.Errorf("FormatTime(%v) = %s, want %s", tt.t, got, tt.want)
		}
	}
}
