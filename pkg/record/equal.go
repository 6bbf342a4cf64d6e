package record

import (
	"math/big"
	"strings"
)

// Equal reports whether two record values are structurally equal: maps
// compare as sets of keys (order aside), arrays element by element, and
// numbers by exact value whatever their representation (2, 2.0 and 2E0
// are equal; 2^53 and 2^53+1 are not).
func Equal(a, b any) bool {
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
		if !IsNumber(b) {
			return false
		}
		return numbersEqual(a, b)
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
		if y, ok := b.(int64); ok {
			return x == y
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
	ra, oka := exactRat(a)
	rb, okb := exactRat(b)
	if !oka || !okb {
		// An exponent too large to expand: compare the literal text.
		return a == b
	}
	return ra.Cmp(rb) == 0
}

// exactRat returns the exact value of a number, refusing literals whose
// exponent would make the expansion expensive.
func exactRat(v any) (*big.Rat, bool) {
	switch x := v.(type) {
	case int64:
		return new(big.Rat).SetInt64(x), true
	case uint64:
		return new(big.Rat).SetInt(new(big.Int).SetUint64(x)), true
	case float64:
		return new(big.Rat).SetFloat64(x), true
	case Number:
		s := string(x)
		if i := strings.IndexAny(s, "eE"); i >= 0 && len(strings.TrimLeft(s[i+1:], "+-0")) > 4 {
			return nil, false
		}
		return new(big.Rat).SetString(s)
	}
	return nil, false
}
