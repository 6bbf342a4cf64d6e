package record

import (
	"strconv"
	"strings"
)

// Equal reports whether two record values are structurally equal: maps
// compare as sets of keys (order aside), arrays element by element, and
// numbers by exact value whatever their representation (2, 2.0 and 2E0
// are equal; 2^53 and 2^53+1 are not). A float counts as the decimal its
// shortest form spells, the form JSON encoders write, so the float 0.1
// equals the literal 0.1. A nil *Map is null.
func Equal(a, b any) bool {
	if m, ok := a.(*Map); ok && m == nil {
		a = nil
	}
	if m, ok := b.(*Map); ok && m == nil {
		b = nil
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case int64, uint64, float64, Number:
		return IsNumber(b) && numbersEqual(a, b)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case *Map:
		y, ok := b.(*Map)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, m := range x.Members {
			v, ok := y.Get(m.Key)
			if !ok || !Equal(m.Value, v) {
				return false
			}
		}
		return true
	}
	return false
}

func numbersEqual(a, b any) bool {
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case uint64:
			return x >= 0 && uint64(x) == y
		}
	case uint64:
		switch y := b.(type) {
		case uint64:
			return x == y
		case int64:
			return y >= 0 && uint64(y) == x
		}
	case float64:
		if y, ok := b.(float64); ok {
			return x == y
		}
	case Number:
		if y, ok := b.(Number); ok && x == y {
			return true
		}
	}
	da, oka := decimalOf(a)
	db, okb := decimalOf(b)
	if !oka || !okb || da.huge || db.huge {
		// Not numbers, or exponents too large to compare: only the same
		// literal is the same value.
		return a == b
	}
	return da == db
}

// decimalOf returns the exact value of a number.
func decimalOf(v any) (decimal, bool) {
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return uintDecimal(true, uint64(-x)), true // -MinInt64 wraps to 2^63, as wanted
		}
		return uintDecimal(false, uint64(x)), true
	case uint64:
		return uintDecimal(false, x), true
	case float64:
		var buf [32]byte
		return parseDecimal(string(strconv.AppendFloat(buf[:0], x, 'e', -1, 64)))
	case Number:
		return parseDecimal(string(x))
	}
	return decimal{}, false
}

func uintDecimal(neg bool, u uint64) decimal {
	if u == 0 {
		return decimal{}
	}
	s := strconv.FormatUint(u, 10)
	digits := strings.TrimRight(s, "0")
	return decimal{neg: neg, digits: digits, exp: int64(len(s) - len(digits))}
}
