package integration

import (
	"fmt"

	"github.com/ctxd/ctxd/pkg/record"
)

// diffPath names the first place two values differ, for failure messages.
func diffPath(path string, a, b any) string {
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return fmt.Sprintf("%s: %T(len %d) vs %T", path, a, len(x), b)
		}
		for i := range x {
			if d := diffPath(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); d != "" {
				return d
			}
		}
		return ""
	case *record.Map:
		y, ok := b.(*record.Map)
		if !ok || x.Len() != y.Len() {
			return fmt.Sprintf("%s: map(%d) vs %T", path, x.Len(), b)
		}
		for _, m := range x.Members {
			v, _ := y.Get(m.Key)
			if d := diffPath(path+"."+m.Key, m.Value, v); d != "" {
				return d
			}
		}
		return ""
	}
	if !record.Equal(a, b) {
		return fmt.Sprintf("%s: %T(%v) vs %T(%v)", path, a, a, b, b)
	}
	return ""
}
