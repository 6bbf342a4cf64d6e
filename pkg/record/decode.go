package record

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Default limits of a Decoder.
const (
	DefaultMaxBytes = 64 << 20 // 64 MiB: a record with several screenshots
	DefaultMaxDepth = 128
)

// Decoder decodes records with limits. The zero value uses the defaults.
type Decoder struct {
	// MaxBytes is the largest input accepted; 0 means DefaultMaxBytes.
	MaxBytes int
	// MaxDepth is the deepest nesting of maps and arrays accepted; 0 means
	// DefaultMaxDepth.
	MaxDepth int
	// ShareInput lets long strings (ShareMinString bytes or more, written
	// without escapes) point into the input instead of being copied: a
	// screenshot is decoded without copying its bytes. The input must then
	// never change while the value is in use, and stays in memory as long
	// as such a string does.
	ShareInput bool
	// ShareShort, with ShareInput, shares short strings too: every string
	// written without escapes points into the input, so that a record's
	// strings cost no copy, and the input stays in memory as long as any
	// of them does. It suits input that is one record in a buffer of its
	// own, held about as long as the record (a consumer's messages), not
	// a record within a larger buffer (a line of a file).
	ShareShort bool
	// Trusted says the JSON input is this package's own encoding
	// (AppendJSON): its strings are valid UTF-8 without control
	// characters, so a string without escapes is only searched for its
	// end, not checked byte by byte, as a packed message read back from a
	// rendering is. Other input is decoded as without it.
	Trusted bool
}

// ShareMinString is the shortest string a Decoder with ShareInput shares
// with its input: shorter ones are copied, so that a small string never
// holds a large input in memory.
const ShareMinString = 4096

func (d Decoder) limits() (maxBytes, maxDepth int) {
	maxBytes, maxDepth = d.MaxBytes, d.MaxDepth
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	return maxBytes, maxDepth
}

// IsJSON reports whether a payload is JSON rather than msgpack: a JSON
// object starts with '{' or white space, which no msgpack map does.
func IsJSON(data []byte) bool {
	if len(data) == 0 {
		return false
	}
	switch data[0] {
	case '{', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// Decode decodes one record, a JSON object or a msgpack map told apart by
// the first byte, and returns it as a *Map.
//
// Input that is neither is decoded in the format its first byte allows, so
// that a value of another type is reported as ErrNotMap and anything else
// as the error that format finds. A JSON value other than an object starts
// with a byte that msgpack reads as a one-byte integer: followed by more
// bytes, it can only be JSON.
func (d Decoder) Decode(data []byte) (*Map, error) {
	m, _, err := d.DecodeCanonical(data)
	return m, err
}

// DecodeCanonical is Decode, and reports whether data is the record's
// canonical JSON: the bytes AppendJSON writes for the map, byte for byte.
// A record written by a JSON encoder without white space (JSON.stringify,
// Go's encoding/json with its HTML escaping off, this package's) usually
// is; the record's bytes can then stand for its encoding. msgpack input
// never is.
func (d Decoder) DecodeCanonical(data []byte) (m *Map, canonical bool, err error) {
	if err := byteOrderMark(data); err != nil {
		return nil, false, err
	}
	var v any
	format := "msgpack"
	if IsJSON(data) || len(data) > 1 && startsJSONValue(data[0]) {
		format = "json"
		v, canonical, err = d.decodeJSON(data)
	} else {
		v, err = d.DecodeMsgpack(data)
		if err != nil && len(data) > 1 && data[0] < 0x80 && !errors.Is(err, ErrTooLarge) {
			// A msgpack positive integer followed by more bytes: never a
			// record, most likely text sent as one.
			return nil, false, &DecodeError{Format: FormatUnknown, Offset: 0, Err: ErrSyntax,
				Detail: fmt.Sprintf("not a JSON object or msgpack map (starts with %q)", textStart(data))}
		}
	}
	if err != nil {
		return nil, false, err
	}
	m, ok := v.(*Map)
	if !ok {
		off := 0
		if format == "json" {
			off = len(data) - len(bytes.TrimLeft(data, " \t\r\n"))
		}
		return nil, false, &DecodeError{Format: format, Offset: off, Err: ErrNotMap, Detail: "got " + TypeName(v)}
	}
	return m, canonical, nil
}

// byteOrderMark refuses input that starts with a Unicode byte order mark:
// JSON sent with one (RFC 8259 forbids it) is neither a JSON record,
// which starts with '{' or white space, nor msgpack, where those bytes
// start an integer. Refusing it rather than skipping the mark keeps one
// answer for every decoder of a stored record, older ones included.
func byteOrderMark(data []byte) error {
	var which string
	switch {
	case bytes.HasPrefix(data, []byte("\xef\xbb\xbf")):
		which = "UTF-8's EF BB BF; remove it"
	case bytes.HasPrefix(data, []byte("\xff\xfe")):
		which = "UTF-16's FF FE; JSON must be UTF-8, with no mark"
	case bytes.HasPrefix(data, []byte("\xfe\xff")):
		which = "UTF-16's FE FF; JSON must be UTF-8, with no mark"
	default:
		return nil
	}
	return &DecodeError{Format: "json", Offset: 0, Err: ErrByteOrderMark, Detail: which}
}

// FormatUnknown is the DecodeError format of an input that is neither
// JSON nor msgpack: its detail says "not a JSON object or msgpack map".
const FormatUnknown = "record"

// textStart returns the first 16 characters of data, for an error
// message: never a part of one (a byte not UTF-8 counts as one).
func textStart(data []byte) string {
	n := 0
	for i := 0; i < len(data); n++ {
		if n == 16 {
			return string(data[:i]) + "..."
		}
		_, size := utf8.DecodeRune(data[i:])
		i += size
	}
	return string(data)
}

// startsJSONValue reports whether c can start a JSON value other than an
// object.
func startsJSONValue(c byte) bool {
	switch c {
	case '[', '"', '-', 't', 'f', 'n':
		return true
	}
	return c >= '0' && c <= '9'
}

// Decode decodes one record with the default limits.
func Decode(data []byte) (*Map, error) { return Decoder{}.Decode(data) }

// DecodeJSON decodes any JSON value with the default limits.
func DecodeJSON(data []byte) (any, error) { return Decoder{}.DecodeJSON(data) }

// DecodeMsgpack decodes any msgpack value with the default limits.
func DecodeMsgpack(data []byte) (any, error) { return Decoder{}.DecodeMsgpack(data) }

// Describe shows a record value in an error message: its JSON when that
// is short (40 bytes at most), else its type ("a string", "a map"), so
// that a message never carries a large or hostile value whole.
func Describe(v any) string {
	b, err := MarshalJSON(v)
	if err != nil || len(b) > 40 {
		return "a " + TypeName(v)
	}
	return string(b)
}

// TypeName names the JSON type of a record value, for error messages.
func TypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case int64, uint64, float64, Number:
		return "number"
	case []any:
		return "array"
	case *Map:
		return "map"
	}
	return "unknown"
}
