package importer

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

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

// eachDecoded decodes the lines of a JSON-lines file and calls fn, in
// order, for each line that is a JSON object; every line counts as an entry
// of rep, and a line that is not an object is reported as not understood.
// A large file is decoded on all processors at once: lines are independent,
// and decoding is most of a conversion's work.
func eachDecoded(data []byte, rep *Report, fn func(n int, line []byte, m *record.Map)) {
	type decoded struct {
		n    int
		line []byte
		v    any
		err  error
	}
	var lines []decoded
	eachLine(data, func(n int, line []byte) { lines = append(lines, decoded{n: n, line: line}) })
	decode := func(d *decoded) { d.v, d.err = lineDecoder.DecodeJSON(d.line) }
	if workers := runtime.GOMAXPROCS(0); workers > 1 && len(data) >= parallelBytes {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(len(lines)); i = next.Add(1) - 1 {
					decode(&lines[i])
				}
			})
		}
		wg.Wait()
	} else {
		for i := range lines {
			decode(&lines[i])
		}
	}
	for i := range lines {
		d := &lines[i]
		rep.Entries++
		if d.err != nil {
			rep.unknown(lineWhere(d.n), "not JSON: %v", d.err)
			continue
		}
		m, ok := d.v.(*record.Map)
		if !ok {
			rep.unknown(lineWhere(d.n), "a JSON %s, not an object", record.TypeName(d.v))
			continue
		}
		d.v = nil // the map is the caller's now
		fn(d.n, d.line, m)
	}
}

// parallelBytes is the size from which eachDecoded decodes on all
// processors.
const parallelBytes = 1 << 20

// noneUnderstood is the error of a file in which no entry was understood.
func noneUnderstood(rep *Report, f Format) error {
	if len(rep.Unknown) > 0 {
		n := rep.Unknown[0]
		return &Error{Where: n.Where, Err: fmt.Errorf("%w (%s): %s", ErrFormat, f, n.Text)}
	}
	return fmt.Errorf("%w (%s): no entries", ErrFormat, f)
}
