package record_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/ctxd/ctxd/pkg/record"
)

// Seeds beyond the corpus in testdata/fuzz: the samples of the other tests.
func addSeeds(f *testing.F) {
	for _, s := range jsonSamples {
		f.Add([]byte(s))
	}
	f.Add([]byte(screenshotRecord()[:2048]))
	for _, s := range []string{"\xef\xbb\xbf{}", "\xef\xbb\xbf", "\xff\xfe{\x00}\x00", "\xef"} {
		f.Add([]byte(s))
	}
}

var sentinels = []error{
	record.ErrNotMap, record.ErrTruncated, record.ErrSyntax, record.ErrInvalidUTF8,
	record.ErrTooDeep, record.ErrTooLarge, record.ErrUnsupported, record.ErrEmpty, record.ErrByteOrderMark,
}

// checkError fails unless err is a *DecodeError wrapping one sentinel at
// an offset within the input.
func checkError(t *testing.T, err error, data []byte) {
	t.Helper()
	var de *record.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *DecodeError", err, err)
	}
	n := 0
	for _, s := range sentinels {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("error %v matches %d sentinels", err, n)
	}
	if de.Offset < 0 || de.Offset > len(data) {
		t.Fatalf("error %v: offset outside the %d bytes of input", err, len(data))
	}
}

// FuzzDecode decodes anything: it never panics, and what it decodes
// survives encoding to JSON and to msgpack.
func FuzzDecode(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := record.Decode(data)
		// Sharing the input's memory changes nothing a caller can see.
		shared, serr := record.Decoder{ShareInput: true}.Decode(bytes.Clone(data))
		// So does sharing short strings.
		if all, aerr := (record.Decoder{ShareInput: true, ShareShort: true}).Decode(bytes.Clone(data)); (err == nil) != (aerr == nil) || err == nil && !record.Equal(all, shared) {
			t.Fatalf("ShareShort: %s, %v; without it %v", repr(all), aerr, err)
		}
		if (err == nil) != (serr == nil) || (err != nil && err.Error() != serr.Error()) {
			t.Fatalf("ShareInput: error %v, without it %v", serr, err)
		}
		if err != nil {
			checkError(t, err, data)
			return
		}
		if !record.Equal(m, shared) {
			t.Fatalf("ShareInput decodes differently\n%s\n%s", repr(m), repr(shared))
		}
		if !utf8.ValidString(repr(m)) {
			t.Fatalf("decoded invalid UTF-8: %s", repr(m))
		}

		js, err := record.MarshalJSON(m)
		if err != nil {
			t.Fatalf("JSON: %v", err)
		}
		if n, err := record.JSONLen(m); err != nil || n != len(js) {
			t.Fatalf("JSONLen %d, %v; encoded %d", n, err, len(js))
		}
		if !json.Valid(js) {
			t.Fatalf("encoding/json refuses our JSON %s", js)
		}
		m2, err := record.Decode(js)
		if err != nil {
			t.Fatalf("our JSON %s: %v", js, err)
		}
		if !record.Equal(m, m2) {
			t.Fatalf("JSON round trip\n in %s\nout %s", repr(m), repr(m2))
		}
		if js2, _ := record.MarshalJSON(m2); !bytes.Equal(js, js2) {
			t.Fatalf("JSON encodes differently the second time\n%s\n%s", js, js2)
		}
		// Canonical input is exactly the encoding; the encoding is
		// always canonical.
		if _, canonical, err := (record.Decoder{}).DecodeCanonical(data); err != nil || canonical != bytes.Equal(data, js) {
			t.Fatalf("DecodeCanonical %q: canonical %v, %v; its encoding %q", data, canonical, err, js)
		}
		if _, canonical, err := (record.Decoder{}).DecodeCanonical(js); err != nil || !canonical {
			t.Fatalf("DecodeCanonical of the encoding %q: canonical %v, %v", js, canonical, err)
		}
		// The encoding decodes the same trusted, as a packed message is
		// read back.
		for _, d := range []record.Decoder{{Trusted: true}, {Trusted: true, ShareInput: true}} {
			if m3, err := d.Decode(bytes.Clone(js)); err != nil || !record.Equal(m, m3) {
				t.Fatalf("%+v: %s decodes as %s, %v", d, js, repr(m3), err)
			}
		}

		mp, err := record.MarshalMsgpack(m)
		if err != nil {
			if !errors.Is(err, record.ErrUnsupported) || !hasHugeNumber(m) {
				t.Fatalf("msgpack: %v", err)
			}
			return
		}
		m3, err := record.Decode(mp)
		if err != nil {
			t.Fatalf("our msgpack % x: %v", mp, err)
		}
		if !record.Equal(throughFloat64(m), m3) {
			t.Fatalf("msgpack round trip\n in %s\nout %s", repr(m), repr(m3))
		}
		if mp2, _ := record.MarshalMsgpack(m3); !bytes.Equal(mp, mp2) {
			t.Fatalf("msgpack encodes differently the second time\n% x\n% x", mp, mp2)
		}
	})
}

// hasHugeNumber reports whether v holds a number beyond float64.
func hasHugeNumber(v any) bool {
	switch x := v.(type) {
	case record.Number:
		f, _ := record.Float(x)
		return math.IsInf(f, 0)
	case []any:
		for _, e := range x {
			if hasHugeNumber(e) {
				return true
			}
		}
	case *record.Map:
		for _, m := range x.Members {
			if hasHugeNumber(m.Value) {
				return true
			}
		}
	}
	return false
}

// throughFloat64 returns v with each number msgpack cannot hold exactly
// (a literal that is not an integer of 64 bits) rounded to a float64, as
// msgpack carries it.
func throughFloat64(v any) any {
	switch x := v.(type) {
	case record.Number:
		if s, ok := record.IntegerString(x); ok {
			if _, err := strconv.ParseInt(s, 10, 64); err == nil {
				return x
			}
			if _, err := strconv.ParseUint(s, 10, 64); err == nil {
				return x
			}
		}
		f, _ := record.Float(x)
		return f
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = throughFloat64(e)
		}
		return out
	case *record.Map:
		out := record.NewMap()
		for _, m := range x.Members {
			out.Members = append(out.Members, record.Member{Key: m.Key, Value: throughFloat64(m.Value)})
		}
		return out
	}
	return v
}

// FuzzDecodeJSON holds our JSON reader to encoding/json: a document that
// it finds valid, in valid UTF-8, decodes with ours unless it nests deeper
// than our limit, to the same structure; and one it refuses, ours refuses.
func FuzzDecodeJSON(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := json.Valid(data) && utf8.Valid(data)
		v, err := record.DecodeJSON(data)
		if err != nil {
			checkError(t, err, data)
			if valid && !errors.Is(err, record.ErrTooDeep) {
				t.Fatalf("encoding/json accepts %q; we: %v", data, err)
			}
			return
		}
		if !valid {
			t.Fatalf("encoding/json refuses %q; we decode %s", data, repr(v))
		}
		var std any
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		if err := d.Decode(&std); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if !reflect.DeepEqual(literals(v), literals(std)) {
			t.Fatalf("%q:\nours %#v\nstd  %#v", data, literals(v), literals(std))
		}
	})
}

// literals is plain with every number kept as its literal text, which for
// a JSON document must be what encoding/json saw.
func literals(v any) any {
	switch x := v.(type) {
	case int64:
		return "#" + strconv.FormatInt(x, 10)
	case record.Number:
		return "#" + string(x)
	case json.Number:
		return "#" + string(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = literals(e)
		}
		return out
	case *record.Map:
		out := make(map[string]any, x.Len())
		for _, m := range x.Members {
			out[m.Key] = literals(m.Value)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = literals(e)
		}
		return out
	}
	return v
}
