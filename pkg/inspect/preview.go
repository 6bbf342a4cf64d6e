package inspect

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ctxd/ctxd/pkg/record"
)

// Limits of a preview: a record shows this much of itself on a page;
// the raw record is a link away.
const (
	previewString = 400  // bytes of one string value
	previewTotal  = 3000 // bytes of a record's preview
)

// preview returns a short JSON rendering of a value for people: long
// strings cut, image data named rather than shown, the whole capped.
func preview(v any, total int) string {
	b, err := record.MarshalJSON(shorten(v, 0))
	if err != nil {
		return fmt.Sprintf("(no JSON form: %v)", err)
	}
	return cut(string(b), total)
}

// shorten returns a copy of v fit for a preview.
func shorten(v any, depth int) any {
	if depth > 32 {
		return "…"
	}
	switch x := v.(type) {
	case string:
		if len(x) > previewString {
			return fmt.Sprintf("%s…[%d bytes]", cut(x, previewString), len(x))
		}
		return x
	case []any:
		n := min(len(x), 200)
		out := make([]any, 0, n+1)
		for _, e := range x[:n] {
			out = append(out, shorten(e, depth+1))
		}
		if n < len(x) {
			out = append(out, fmt.Sprintf("…[%d more]", len(x)-n))
		}
		return out
	case *record.Map:
		img, isImg := imageOf(x)
		out := &record.Map{Members: make([]record.Member, 0, len(x.Members))}
		for _, m := range x.Members {
			val := m.Value
			if isImg && (m.Key == "data" || m.Key == "source") && img.data != "" {
				val = fmt.Sprintf("[%s, %d bytes of base64]", img.mime, len(img.data))
			} else {
				val = shorten(val, depth+1)
			}
			out.Members = append(out.Members, record.Member{Key: cut(m.Key, previewString), Value: val})
		}
		return out
	}
	return v
}

// cut returns at most n bytes of s, not splitting a character.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// oneLine is a short single-line summary of a message for a terminal:
// its role and the start of its text, control characters replaced so
// that a record cannot drive the terminal.
func oneLine(v any, n int) string {
	m, ok := v.(*record.Map)
	if !ok {
		return clean(preview(v, n), n)
	}
	role, _ := m.String("role")
	text := ""
	switch c, _ := m.Get("content"); x := c.(type) {
	case string:
		text = x
	case []any:
		var parts []string
		for _, e := range x {
			b, ok := e.(*record.Map)
			if !ok {
				continue
			}
			t, _ := b.String("type")
			switch t {
			case "text":
				s, _ := b.String("text")
				parts = append(parts, s)
			case "image":
				parts = append(parts, "[image]")
			case "toolCall", "tool_use", "tool_call":
				name, _ := b.String("name")
				parts = append(parts, "[call "+name+"]")
			default:
				if _, isImg := imageOf(b); isImg {
					parts = append(parts, "[image]")
				} else {
					parts = append(parts, "["+t+"]")
				}
			}
		}
		text = strings.Join(parts, " ")
	}
	if tc, ok := m.Get("tool_calls"); ok {
		if arr, ok := tc.([]any); ok && len(arr) > 0 {
			text += fmt.Sprintf(" [%d tool_calls]", len(arr))
		}
	}
	return clean(role+": "+text, n)
}

// clean replaces control characters (escape sequences included) and
// runs of white space with one space, and cuts to n bytes.
func clean(s string, n int) string {
	s = cut(s, n*2)
	var b strings.Builder
	space := false
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == utf8.RuneError {
			if !space {
				b.WriteByte(' ')
			}
			space = true
			continue
		}
		space = false
		b.WriteRune(r)
	}
	return cut(strings.TrimSpace(b.String()), n)
}
