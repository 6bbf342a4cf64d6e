package importer

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

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

// newline ends a line of a source file.
var newline = []byte{'\n'}

// eachLine calls fn for every non-blank line of data with its 1-based
// number.
func eachLine(data []byte, fn func(n int, line []byte)) {
	for n := 1; len(data) > 0; n++ {
		var line []byte
		line, data, _ = bytes.Cut(data, newline)
		if line = bytes.TrimSpace(line); len(line) > 0 {
			fn(n, line)
		}
	}
}

func lineWhere(n int) string { return "line " + strconv.Itoa(n) }

// scanner reads what a parser needs of a large line without decoding the
// line: it returns a map of only those fields and the bytes of the values
// the parser keeps as written, or a nil map to have the line decoded
// whole. It passes a line only when validCapture does, so that a line it
// reads is one the decoder takes, and the conversion is the same.
type scanner func(line []byte) (*record.Map, kept)

// kept is what a scanner found in a line: the bytes of the values a parser
// keeps as the line wrote them.
type kept struct {
	// sparse is set when the map holds only the fields the parser reads.
	sparse                      bool
	message, content, timestamp []byte
	// rec is the record a scanner built from the line, when it can: the
	// work then happens on all processors.
	rec *Record
	// blocks are the content blocks the branch selection reads, when the
	// scanner listed them (hasBlocks).
	blocks    []block
	hasBlocks bool
}

// eachDecoded decodes the lines of a JSON-lines file and calls fn, in
// order, for each line that is a JSON object; every line counts as an entry
// of rep, and a line that is JSON but not an object is reported as not
// understood. A line that does not decode fails the file, naming it: it
// may be an entry others hang off, and leaving it out would take them
// with it. Invalid UTF-8 in a string is the exception: it is replaced
// with U+FFFD, and rep says where (see decodeLenient). With scan, a large
// line is read by scan rather than decoded, when scan can. A large file is
// read on all processors at once, in chunks of whole lines that each
// worker finds itself: lines are independent, and finding and decoding
// them is most of a conversion's work.
func eachDecoded(data []byte, rep *Report, scan scanner, fn func(n int, line []byte, m *record.Map, k kept)) error {
	workers := 1
	if len(data) >= parallelBytes {
		workers = runtime.GOMAXPROCS(0)
	}
	return decodeChunks(data, rep, scan, chunkBytes, workers, fn)
}

// decodeChunks is eachDecoded with chunks of about size bytes, read by
// that many workers.
func decodeChunks(data []byte, rep *Report, scan scanner, size, workers int, fn func(n int, line []byte, m *record.Map, k kept)) error {
	decode := func(d *decoded) {
		d.line, d.fix, d.err = lenient(d.line, func(line []byte) error {
			if scan != nil && len(line) >= scanMin {
				if m, k := scan(line); m != nil {
					d.v, d.k = m, k
					return nil
				}
			}
			var err error
			d.v, err = lineDecoder.DecodeJSON(line)
			return err
		})
	}
	chunks := splitLines(data, size)
	if workers > 1 {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range min(workers, len(chunks)) {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(len(chunks)); i = next.Add(1) - 1 {
					chunks[i].decode(decode)
				}
			})
		}
		wg.Wait()
	} else {
		for i := range chunks {
			chunks[i].decode(decode)
		}
	}
	n := 0 // lines before the chunk
	for ci := range chunks {
		c := &chunks[ci]
		for i := range c.lines {
			d := &c.lines[i]
			rep.Entries++
			where := lineWhere(n + d.n)
			if d.err != nil {
				err := undecodable(d.err)
				if last := ci == len(chunks)-1 && i == len(c.lines)-1; last && data[len(data)-1] != '\n' && errors.Is(d.err, record.ErrTruncated) {
					err = fmt.Errorf("%w; the file ends inside it: if the tool is writing it, import the file again once it has", err)
				}
				return &Error{Where: where, Err: err}
			}
			if d.fix.bytes > 0 {
				rep.approx(where, "%s", d.fix)
			}
			m, ok := d.v.(*record.Map)
			if !ok {
				rep.unknown(where, "a JSON %s, not an object", record.TypeName(d.v))
				continue
			}
			fn(n+d.n, d.line, m, d.k)
		}
		n += c.count
		c.lines = nil // the maps are the caller's now
	}
	return nil
}

// undecodable is the error of an entry that does not decode.
func undecodable(err error) error {
	return fmt.Errorf("does not decode: %w", err)
}

// utf8Fix says what fixUTF8 replaced.
type utf8Fix struct {
	bytes int // invalid bytes replaced
	at    int // the offset of the first
}

func (f utf8Fix) String() string {
	s := "s"
	if f.bytes == 1 {
		s = ""
	}
	return fmt.Sprintf("invalid UTF-8 replaced with U+FFFD: %d byte%s, at byte %d", f.bytes, s, f.at)
}

// fixUTF8 returns a copy of b with each byte that is not part of valid
// UTF-8 replaced with U+FFFD, as encoding/json decodes such a string. A
// transcript holds what a tool printed, and a byte a terminal could not
// show either is not worth the entry it is in, nor the entries that hang
// off it: the text around it is kept, and the report says where it was.
// Structure is never changed: the bytes replaced are 0x80 and above,
// never a quote, a backslash or a bracket.
func fixUTF8(b []byte) ([]byte, utf8Fix) {
	var f utf8Fix
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			if f.bytes == 0 {
				f.at = i
			}
			f.bytes++
			out = utf8.AppendRune(out, utf8.RuneError)
			i++
			continue
		}
		out = append(out, b[i:i+size]...)
		i += size
	}
	return out, f
}

// lenient runs decode on b and, when it fails on invalid UTF-8 in a
// string, again on b with that replaced (fixUTF8). It returns the bytes
// decoded and what was replaced in them; the error of the second run
// names its offset in b.
func lenient(b []byte, decode func([]byte) error) ([]byte, utf8Fix, error) {
	err := decode(b)
	if !errors.Is(err, record.ErrInvalidUTF8) {
		return b, utf8Fix{}, err
	}
	fixed, fix := fixUTF8(b)
	if err := decode(fixed); err != nil {
		if de := (*record.DecodeError)(nil); errors.As(err, &de) {
			at := *de
			at.Offset = offsetIn(b, de.Offset)
			err = &at
		}
		return b, utf8Fix{}, err
	}
	return fixed, fix, nil
}

// offsetIn turns an offset in fixUTF8(b) into one in b.
func offsetIn(b []byte, off int) int {
	i := 0
	for j := 0; j < off && i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			i, j = i+1, j+utf8.RuneLen(utf8.RuneError)
			continue
		}
		i, j = i+size, j+size
	}
	return i
}

// decodeLenient decodes one JSON value, replacing invalid UTF-8 in it as
// eachDecoded does a line's.
func decodeLenient(b []byte) (v any, fix utf8Fix, err error) {
	_, fix, err = lenient(b, func(b []byte) error {
		var err error
		v, err = lineDecoder.DecodeJSON(b)
		return err
	})
	return v, fix, err
}

// decodeWhole decodes a file that is one JSON value written over many
// lines (Gemini's chat file, an OpenHands event file), leniently as
// decodeLenient does. Its failure is an *Error naming the line, and the
// line of the first byte replaced is returned.
func decodeWhole(data []byte) (v any, fix utf8Fix, fixLine int, err error) {
	body := bytes.TrimSpace(data)
	lead := len(data) - len(bytes.TrimLeft(data, " \t\r\n"))
	lineOf := func(off int) int { return 1 + bytes.Count(data[:min(lead+off, len(data))], []byte{'\n'}) }
	v, fix, err = decodeLenient(body)
	if err != nil {
		where := ""
		if de := (*record.DecodeError)(nil); errors.As(err, &de) {
			where = lineWhere(lineOf(de.Offset))
		}
		return nil, fix, 0, &Error{Where: where, Err: undecodable(err)}
	}
	if fix.bytes > 0 {
		fixLine = lineOf(fix.at)
	}
	return v, fix, fixLine, nil
}

// jsonLines reports whether data looks like JSON lines: one of its first
// lines decodes as a JSON object.
func jsonLines(data []byte) bool {
	const lookAhead = 50
	seen, found := 0, false
	eachLine(data, func(n int, line []byte) {
		if found || seen >= lookAhead {
			return
		}
		seen++
		v, _, _ := decodeLenient(line)
		_, found = v.(*record.Map)
	})
	return found
}

// decoded is a line of a chunk and what decoding it gave.
type decoded struct {
	n    int // the line's number in its chunk, from 1
	line []byte
	v    any
	err  error
	k    kept
	fix  utf8Fix // the invalid UTF-8 replaced in line, which is then a copy
}

// chunk is a run of whole lines of a file.
type chunk struct {
	data  []byte
	count int // its newlines: the lines it holds, blank ones included, but for a last one without a newline
	lines []decoded
}

// decode counts the chunk's lines and decodes the non-blank ones.
func (c *chunk) decode(decode func(*decoded)) {
	c.count = bytes.Count(c.data, []byte{'\n'})
	c.lines = make([]decoded, 0, c.count+1)
	eachLine(c.data, func(n int, line []byte) {
		c.lines = append(c.lines, decoded{n: n, line: line})
		decode(&c.lines[len(c.lines)-1])
	})
}

// splitLines cuts data into chunks of about size bytes, each ending at the
// end of a line.
func splitLines(data []byte, size int) []chunk {
	var out []chunk
	for len(data) > 0 {
		end := len(data)
		if size < end {
			if i := bytes.IndexByte(data[size:], '\n'); i >= 0 {
				end = size + i + 1
			}
		}
		out = append(out, chunk{data: data[:end]})
		data = data[end:]
	}
	return out
}

// chunkBytes is the size of the chunks eachDecoded hands its workers:
// large enough that a chunk is not mostly overhead, small enough that the
// workers finish together.
const chunkBytes = 1 << 20

// scanMin is the size from which a line is scanned rather than decoded:
// below it, scanning costs about what decoding does.
const scanMin = 256

// smallValue decodes a scalar JSON value: a string without escapes or a
// literal directly, anything else with the decoder.
func smallValue(v []byte) (any, bool) {
	switch {
	case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v):
		return string(v[1 : len(v)-1]), true
	case string(v) == "true":
		return true, true
	case string(v) == "false":
		return false, true
	case string(v) == "null":
		return nil, true
	}
	x, err := lineDecoder.DecodeJSON(v)
	return x, err == nil
}

// messageFields names what scanMessage reads of a line: the top-level
// keys (first "type", last "message") and the keys of the message (last
// "content").
type messageFields struct {
	top, inner []string
	types      map[string]bool // the entry types to scan
}

// scanMessage is the scanner of formats whose large lines are message
// entries: in one validating pass over the line, it reads the fields f
// names, keeping message, message.content and timestamp as bytes.
func scanMessage(line []byte, f *messageFields) (*record.Map, kept) {
	line = bytes.TrimSpace(line)
	var tb, ib [16][]byte
	var sb [16]*capture
	inner := &capture{keys: f.inner, vals: ib[:len(f.inner)]}
	top := &capture{keys: f.top, sub: sb[:len(f.top)], vals: tb[:len(f.top)]}
	top.sub[len(f.top)-1] = inner // "message"
	if !validCapture(line, record.DefaultMaxDepth, top) {
		return nil, kept{}
	}
	msg, content := top.vals[len(f.top)-1], inner.vals[len(f.inner)-1]
	if msg == nil || msg[0] != '{' || content == nil {
		return nil, kept{}
	}
	m, mm := scalars(f.top, top.vals), scalars(f.inner, inner.vals)
	if m == nil || mm == nil || !f.types[str(m, "type")] {
		return nil, kept{}
	}
	mm.Set("content", nil) // in kept.content
	m.Set("message", mm)
	k := kept{sparse: true, message: msg, content: content}
	for i, key := range f.top {
		if key == "timestamp" {
			k.timestamp = top.vals[i]
		}
	}
	return m, k
}

// scalars returns a map of the scalar values among vals, decoded; the
// caller takes containers from their bytes.
func scalars(keys []string, vals [][]byte) *record.Map {
	m := &record.Map{Members: make([]record.Member, 0, len(keys))}
	for i, v := range vals {
		if v == nil || v[0] == '{' || v[0] == '[' {
			continue
		}
		x, ok := smallValue(v)
		if !ok {
			return nil
		}
		m.Set(keys[i], x)
	}
	return m
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
