package record

import (
	"math"
	"strconv"
	"strings"
)

// Number is a JSON number literal kept as written, so that values such as
// 1.5, 1E1 or 18446744073709551617 keep their exact value through a decode
// and encode. Integer literals that fit in int64 decode to int64 instead,
// except -0, which int64 cannot tell from 0.
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

// Len returns the number of members; a nil map has none.
func (m *Map) Len() int {
	if m == nil {
		return 0
	}
	return len(m.Members)
}

// Get returns the value stored under key and whether the key is present.
func (m *Map) Get(key string) (any, bool) {
	if m == nil {
		return nil, false
	}
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
		d, ok := parseDecimal(string(n))
		return ok && d.exp >= 0
	}
	return false
}

// maxSpelledDigits bounds the decimal form IntegerString spells out, so that
// a hostile 1E999999999 cannot make it allocate a gigabyte. Such a value is
// still an integer for IsInteger.
const maxSpelledDigits = 4096

// IntegerString returns the exact decimal form of v when v is a
// whole-valued number ("3" for 3.0, "10" for 1E1) of at most 4096 digits.
// A float counts as the decimal its shortest form spells, the form JSON
// encoders write: 2^63 as a float is 9223372036854776000.
func IntegerString(v any) (string, bool) {
	switch n := v.(type) {
	case int64:
		return strconv.FormatInt(n, 10), true
	case uint64:
		return strconv.FormatUint(n, 10), true
	case float64:
		if math.IsInf(n, 0) || n != math.Trunc(n) {
			return "", false
		}
		if n == 0 {
			return "0", true // also for -0
		}
		return strconv.FormatFloat(n, 'f', -1, 64), true
	case Number:
		d, ok := parseDecimal(string(n))
		if !ok || d.exp < 0 || d.exp > maxSpelledDigits {
			return "", false
		}
		if d.digits == "" {
			return "0", true
		}
		b := make([]byte, 0, 1+len(d.digits)+int(d.exp))
		if d.neg {
			b = append(b, '-')
		}
		b = append(b, d.digits...)
		for range d.exp {
			b = append(b, '0')
		}
		return string(b), true
	}
	return "", false
}

// decimal is the exact value of a number, digits × 10^exp, in a form where
// equal values look the same.
type decimal struct {
	neg    bool   // never set for zero
	digits string // free of leading and trailing zeros; "" for zero
	exp    int64
	// huge reports an exponent beyond ±2^60, clamped in exp: still whole
	// when positive and a fraction when negative, but not comparable.
	huge bool
}

// maxExp is where exponents stop being exact; no input holds a number with
// that many digits.
const maxExp = 1 << 60

// parseDecimal reads a JSON number literal; ok is false for anything
// else.
func parseDecimal(lit string) (d decimal, ok bool) {
	s := lit
	if s != "" && s[0] == '-' {
		d.neg = true
		s = s[1:]
	}
	// Integer part: 0, or digits without a leading zero.
	i := 0
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return decimal{}, false
	}
	intPart, frac := s[:i], ""
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == i+1 {
			return decimal{}, false
		}
		frac, i = s[i+1:j], j
	}
	var e int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		negExp := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			negExp = s[i] == '-'
			i++
		}
		if i == len(s) {
			return decimal{}, false
		}
		for ; i < len(s); i++ {
			if !isDigit(s[i]) {
				return decimal{}, false
			}
			if e < maxExp {
				e = e*10 + int64(s[i]-'0')
			}
		}
		if e >= maxExp {
			e, d.huge = maxExp, true
		}
		if negExp {
			e = -e
		}
	}
	if i != len(s) {
		return decimal{}, false
	}
	// The value is (intPart followed by frac) × 10^e; drop the zeros that
	// do not change it.
	e -= int64(len(frac))
	trimmed := strings.TrimRight(frac, "0")
	e += int64(len(frac) - len(trimmed))
	frac = trimmed
	var digits string
	switch {
	case frac == "":
		digits = strings.TrimRight(intPart, "0")
		e += int64(len(intPart) - len(digits))
	case intPart == "0":
		digits = strings.TrimLeft(frac, "0")
	default:
		digits = intPart + frac
	}
	if digits == "" {
		return decimal{}, true // zero, whatever its sign and exponent
	}
	d.digits, d.exp = digits, e
	return d, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// validNumber reports whether s is a JSON number literal.
func validNumber(s string) bool {
	_, ok := parseDecimal(s)
	return ok
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
		if !validNumber(string(n)) {
			return 0, false
		}
		// A valid literal only fails by being out of range, and then f is
		// the infinity or zero it rounds to.
		f, _ := strconv.ParseFloat(string(n), 64)
		return f, true
	}
	return 0, false
}
