package importer

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// str returns m[key] when it is a string, else "".
func str(m *record.Map, key string) string {
	s, _ := m.String(key)
	return s
}

// get returns m[key], nil when absent.
func get(m *record.Map, key string) any {
	v, _ := m.Get(key)
	return v
}

// mapAt returns m[key] when it is a map, else nil.
func mapAt(m *record.Map, key string) *record.Map {
	v, _ := m.Get(key)
	mm, _ := v.(*record.Map)
	return mm
}

// arrAt returns m[key] when it is an array, else nil.
func arrAt(m *record.Map, key string) []any {
	v, _ := m.Get(key)
	a, _ := v.([]any)
	return a
}

// intAt returns m[key] when it is an integer that fits in int64.
func intAt(m *record.Map, key string) (int64, bool) {
	v, _ := m.Get(key)
	switch n := v.(type) {
	case int64:
		return n, true
	case float64:
		if n == float64(int64(n)) {
			return int64(n), true
		}
	case record.Number:
		if f, ok := record.Float(n); ok && f == float64(int64(f)) {
			return int64(f), true
		}
	}
	return 0, false
}

// with returns a copy of m's members with key set to value (appended when
// absent), leaving m unchanged.
func with(m *record.Map, key string, value any) *record.Map {
	c := m.Clone()
	c.Set(key, value)
	return c
}

// setIf sets key on m when value is not nil.
func setIf(m *record.Map, key string, value any) {
	if value != nil {
		m.Set(key, value)
	}
}

func textBlock(text string) *record.Map {
	return record.NewMap("type", "text", "text", text)
}

// imageFromDataURL turns a data URL (data:image/png;base64,....) into a
// ctxd image block holding the base64 text unchanged. It reports false for
// anything else: an http URL cannot be inlined without inventing bytes.
func imageFromDataURL(url string) (*record.Map, bool) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return nil, false
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, false
	}
	mime, ok := strings.CutSuffix(meta, ";base64")
	if !ok || !strings.HasPrefix(mime, "image/") {
		return nil, false
	}
	return record.NewMap("type", "image", "data", data, "mimeType", mime), true
}

// millis turns an RFC 3339 timestamp into Unix milliseconds, the way pi
// stamps the messages it builds; anything else stays as it was.
func millis(v any) any {
	if s, ok := v.(string); ok {
		if ms, ok := projection.ParseTimestamp(s); ok {
			return ms
		}
	}
	return v
}

// jsonText encodes a value as JSON text, for a structured tool output that
// becomes a text block.
func jsonText(v any) string {
	b, err := record.MarshalJSON(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// eachLine calls fn for every non-blank line of data with its 1-based
// number.
func eachLine(data []byte, fn func(n int, line []byte)) {
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			fn(n, line)
		}
	}
}

func lineWhere(n int) string { return fmt.Sprintf("line %d", n) }

// decodeLine decodes one JSON line into a map, reporting a line that is not
// a JSON object as not understood.
func decodeLine(rep *Report, n int, line []byte) *record.Map {
	v, err := lineDecoder.DecodeJSON(line)
	if err != nil {
		rep.unknown(lineWhere(n), "not JSON: %v", err)
		return nil
	}
	m, ok := v.(*record.Map)
	if !ok {
		rep.unknown(lineWhere(n), "a JSON %s, not an object", record.TypeName(v))
		return nil
	}
	return m
}

// noneUnderstood is the error of a file in which no entry was understood.
func noneUnderstood(rep *Report, f Format) error {
	if len(rep.Unknown) > 0 {
		n := rep.Unknown[0]
		return &Error{Where: n.Where, Err: fmt.Errorf("%w (%s): %s", ErrFormat, f, n.Text)}
	}
	return fmt.Errorf("%w (%s): no entries", ErrFormat, f)
}
