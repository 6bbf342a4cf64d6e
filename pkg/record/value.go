package record

import (
	"math"
	"math/big"
	"strconv"
	"strings"
)

// A record value is one of these Go types, which together hold JSON's data
// model without loss:
//
//	nil       null
//	bool      true, false
//	string    a string (always valid UTF-8)
//	int64     an integer that fits in int64
//	uint64    an integer above math.MaxInt64 that fits in uint64
//	float64   a finite msgpack float
//	Number    any other JSON number, kept as its literal text
//	[]any     an array
//	*Map      a map with string keys, in the order they were read
//
// Decoders produce only these types and encoders accept only these types.

// Number is a JSON number literal kept as written, so that values such as
// 1.5, 1E1 or 18446744073709551617 keep their exact value through a decode
// and encode. Integer literals that fit in int64 decode to int64 instead.
type Number string

// Member is one key and value of a Map.
type Member struct {
	Key   string
	Value any
}

// Map is a record map: string keys in the order they were read. Lookups
// scan linearly, which beats hashing for the handful of keys a record has.
type Map struct {
	Members []Member
}

// NewMap returns a map holding the given key, value pairs in order; it
// panics if kv has an odd length or a key that is not a string.
func NewMap(kv ...any) *Map {
	m := &Map{Members: make([]Member, 0, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Set(kv[i].(string), kv[i+1])
	}
	if len(kv)%2 != 0 {
		panic("record.NewMap: odd number of arguments")
	}
	return m
}

// Len returns the number of members.
func (m *Map) Len() int { return len(m.Members) }

// Get returns the value stored under key and whether the key is present.
func (m *Map) Get(key string) (any, bool) {
	for i := range m.Members {
		if m.Members[i].Key == key {
			return m.Members[i].Value, true
		}
	}
	return nil, false
}

// String returns the value under key when it is a string.
func (m *Map) String(key string) (string, bool) {
	v, _ := m.Get(key)
	s, ok := v.(string)
	return s, ok
}

// Set stores value under key, keeping the key's position when it is
// already present and appending it otherwise.
func (m *Map) Set(key string, value any) {
	for i := range m.Members {
		if m.Members[i].Key == key {
			m.Members[i].Value = value
			return
		}
	}
	m.Members = append(m.Members, Member{Key: key, Value: value})
}

// Clone returns a shallow copy of m: a new member list sharing the values.
func (m *Map) Clone() *Map {
	return &Map{Members: append([]Member(nil), m.Members...)}
}

// IsTrue reports whether v is the boolean true (nothing merely truthy).
func IsTrue(v any) bool {
	b, ok := v.(bool)
	return ok && b
}

// IsNumber reports whether v is a number of any representation.
func IsNumber(v any) bool {
	switch v.(type) {
	case int64, uint64, float64, Number:
		return true
	}
	return false
}

// IsInteger reports whether v is a whole-valued number: 2, 2.0, 1E1 and a
// float holding 3.0 all are, however large.
func IsInteger(v any) bool {
	switch n := v.(type) {
	case int64, uint64:
		return true
	case float64:
		return n == math.Trunc(n) && !math.IsInf(n, 0)
	case Number:
		_, _, isInt, ok := splitNumber(string(n))
		return ok && isInt
	}
	return false
}

// maxSpelledDigits bounds the decimal form IntegerString spells out, so that
// a hostile 1E999999999 cannot make it allocate a gigabyte. Such a value is
// still an integer for IsInteger.
const maxSpelledDigits = 4096

// IntegerString returns the exact decimal form of v when v is a
// whole-valued number ("3" for 3.0, "10" for 1E1) of at most 4096 digits.
func IntegerString(v any) (string, bool) {
	switch n := v.(type) {
	case int64:
		return strconv.FormatInt(n, 10), true
	case uint64:
		return strconv.FormatUint(n, 10), true
	case float64:
		if math.IsInf(n, 0) || math.IsNaN(n) || n != math.Trunc(n) {
			return "", false
		}
		if n >= -1<<53 && n <= 1<<53 {
			return strconv.FormatInt(int64(n), 10), true
		}
		i, _ := big.NewFloat(n).Int(nil)
		return i.String(), true
	case Number:
		digits, exp, isInt, ok := splitNumber(string(n))
		if !ok || !isInt || exp > maxSpelledDigits {
			return "", false
		}
		if digits == "" {
			return "0", true
		}
		s := digits + strings.Repeat("0", int(exp))
		if n[0] == '-' {
			s = "-" + s
		}
		return s, true
	}
	return "", false
}

// splitNumber reads a JSON number literal as digits * 10^exp, with digits
// free of leading and trailing zeros ("" for zero). isInt reports whether
// the value is whole; exp is only meaningful when it is. ok is false for
// text that is not a number literal.
func splitNumber(lit string) (digits string, exp int64, isInt, ok bool) {
	mant := strings.TrimPrefix(lit, "-")
	expText := ""
	if i := strings.IndexAny(mant, "eE"); i >= 0 {
		mant, expText = mant[:i], mant[i+1:]
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	if intPart == "" || !allDigits(intPart) || !allDigits(frac) {
		return "", 0, false, false
	}
	all := strings.TrimLeft(intPart+frac, "0")
	digits = strings.TrimRight(all, "0")
	if digits == "" {
		return "", 0, true, true
	}
	shift := int64(len(all)-len(digits)) - int64(len(frac))
	if expText != "" {
		negExp := expText[0] == '-'
		expDigits := strings.TrimLeft(expText, "+-")
		if expDigits == "" || !allDigits(expDigits) {
			return "", 0, false, false
		}
		e, err := strconv.ParseInt(expDigits, 10, 64)
		if err != nil || e > 1<<60 {
			// Beyond any real exponent: a whole number when positive, a
			// fraction when negative.
			return digits, math.MaxInt64, !negExp, true
		}
		if negExp {
			e = -e
		}
		shift += e
	}
	if shift < 0 {
		return digits, shift, false, true
	}
	return digits, shift, true, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Float returns v as a float64 when it is a number (possibly rounded).
func Float(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	case Number:
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil && !isRangeErr(err) {
			return 0, false
		}
		return f, true
	}
	return 0, false
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
