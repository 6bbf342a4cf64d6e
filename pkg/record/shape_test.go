package record_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

// testShape reads members at two levels, arrays of them, and a scalar
// that may be anything, as a reader of messages does.
var testShape = &record.Shape{Keys: []record.ShapeKey{
	{Name: "role", Shape: record.WholeShape},
	{Name: "content", Shape: &record.Shape{Scalars: true, Elems: &record.Shape{Keys: []record.ShapeKey{
		{Name: "type", Shape: record.WholeShape},
		{Name: "id", Shape: record.WholeShape},
		{Name: "content", Shape: &record.Shape{Elems: &record.Shape{Keys: []record.ShapeKey{{Name: "type", Shape: record.WholeShape}}}}},
	}}}},
	{Name: "tool_calls", Shape: &record.Shape{Elems: &record.Shape{Keys: []record.ShapeKey{
		{Name: "function", Shape: &record.Shape{Keys: []record.ShapeKey{{Name: "name", Shape: record.WholeShape}}}},
	}}}},
}}

// through returns v seen through sh: what DecodeShape builds of it.
func through(v any, sh *record.Shape) any {
	switch {
	case sh == nil:
		return record.Skipped{}
	case sh.Whole:
		return v
	}
	switch x := v.(type) {
	case *record.Map:
		out := &record.Map{Members: []record.Member{}}
		for _, m := range x.Members {
			for _, k := range sh.Keys {
				if k.Name == m.Key {
					out.Members = append(out.Members, record.Member{Key: m.Key, Value: through(m.Value, k.Shape)})
				}
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = through(e, sh.Elems)
		}
		return out
	}
	if sh.Scalars {
		return v
	}
	return record.Skipped{}
}

// checkShape holds DecodeShape to its promise on data: when it says yes,
// data decodes whole, canonical, to a record that the skeleton is that
// record seen through the shape; and every canonical JSON object of
// narrow maps gets a yes.
func checkShape(t *testing.T, d record.Decoder, data []byte) {
	t.Helper()
	skel, ok := d.DecodeShape(data, testShape)
	// A reader that decoded other records first says the same.
	r := d.ShapeReader(testShape)
	for _, other := range shapeOthers {
		r.Decode([]byte(other))
	}
	if again, rok := r.Decode(data); rok != ok || ok && !same(again, skel) {
		t.Fatalf("ShapeReader of %q: %v %s; DecodeShape: %v %s", data, rok, repr(again), ok, repr(skel))
	}
	m, canonical, err := d.DecodeCanonical(bytes.Clone(data))
	if ok {
		if err != nil || !canonical {
			t.Fatalf("DecodeShape accepts %q; DecodeCanonical: canonical %v, %v", data, canonical, err)
		}
		if want := through(m, testShape); !same(skel, want) {
			t.Fatalf("DecodeShape of %q\n got %s\nwant %s", data, repr(skel), repr(want))
		}
		return
	}
	if err == nil && canonical && len(data) > 0 && data[0] == '{' && !wideMap(m) {
		t.Fatalf("DecodeShape refuses %q, which is canonical", data)
	}
}

// same reports whether a and b are the same values of the same types,
// maps' members in the same order.
func same(a, b any) bool {
	switch x := a.(type) {
	case *record.Map:
		y, ok := b.(*record.Map)
		if !ok || len(x.Members) != len(y.Members) {
			return false
		}
		for i := range x.Members {
			if x.Members[i].Key != y.Members[i].Key || !same(x.Members[i].Value, y.Members[i].Value) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !same(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return fmt.Sprintf("%T %v", a, a) == fmt.Sprintf("%T %v", b, b)
}

// shapeOthers are records a ShapeReader decodes before the one checked,
// so that it builds that one in used memory.
var shapeOthers = []string{
	`{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"toolCall","id":"x","content":[{"type":"image"},{"type":"image"}]}],"tool_calls":[{"function":{"name":"f"}}]}`,
	`{"role":"user","content":"esc\n\"aped\u0001"}`,
	`{"a":{"b":[1,2,3]},"role":"x"}`,
}

func TestShapeReader_ReusesItsMemory(t *testing.T) {
	r := record.Decoder{ShareInput: true, ShareShort: true}.ShapeReader(testShape)
	recs := [][]byte{
		[]byte(`{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"toolCall","id":"c1","name":"read"}],"usage":{"input":12345}}`),
		[]byte(`{"role":"toolResult","toolCallId":"c1","content":[{"type":"image","data":"AAAA"}],"n":-123456}`),
	}
	for _, rec := range recs {
		_, ok := r.Decode(rec)
		require.True(t, ok)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, rec := range recs {
			if _, ok := r.Decode(rec); !ok {
				t.Fatal("refused")
			}
		}
	})
	require.Zero(t, allocs, "allocations a record once the reader's memory is large enough")
	// What it returns is the record's skeleton, whatever it built before.
	m, ok := r.Decode(recs[0])
	require.True(t, ok)
	want, err := record.Decode(recs[0])
	require.NoError(t, err)
	require.True(t, same(through(want, testShape), m), "%s", repr(m))
}

// wideMap reports whether v holds a map of more members than DecodeShape
// takes (32).
func wideMap(v any) bool {
	switch x := v.(type) {
	case *record.Map:
		if len(x.Members) > 32 {
			return true
		}
		for _, m := range x.Members {
			if wideMap(m.Value) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if wideMap(e) {
				return true
			}
		}
	}
	return false
}

func TestDecodeShape(t *testing.T) {
	wideOf := func(n int) string {
		wide := &strings.Builder{}
		wide.WriteString(`{"a":{`)
		for i := range n {
			if i > 0 {
				wide.WriteByte(',')
			}
			fmt.Fprintf(wide, `"k%d":%d`, i, i)
		}
		wide.WriteString(`}}`)
		return wide.String()
	}
	cases := []struct {
		in string
		ok bool
	}{
		{`{}`, true},
		{`{"role":"user","content":"hi"}`, true},
		{`{"role":"user","content":"  \n"}`, true},
		{`{"role":"assistant","content":[{"type":"text","text":"a\"b\\c\n\u001f"},{"type":"toolCall","id":"c1","arguments":{"x":[1,-2.5e+3,true,false,null,{}]}}],"usage":{"input":1}}`, true},
		{`{"role":"toolResult","content":[{"type":"image","data":"AAAA"},"text",7,null,[1]]}`, true},
		{`{"role":"user","content":[{"type":"tool_result","id":"x","content":[{"type":"image"},{"type":"text","text":"t"}]}]}`, true},
		{`{"tool_calls":[{"id":"c","function":{"name":"shell","arguments":"{\"a\":1}"}},{"function":[1]},{"function":"f"}]}`, true},
		{`{"content":{"type":"x"},"role":{"a":1}}`, true},
		{`{"role":"user","x":"é日本\u0000"}`, true},
		{`{"n":[0,-0,1.5,1E400,18446744073709551616,-9223372036854775808]}`, true},
		{`{"deep":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`, true},
		{wideOf(32), true},
		{wideOf(33), false}, // left to a whole decode
		// Written otherwise: white space, escapes the encoder does not
		// write, a repeated key, not an object.
		{`{ "role":"user"}`, false},
		{`{"role":"user"} `, false},
		{`{"role" :"user"}`, false},
		{`{"role":"user","content":[1, 2]}`, false},
		{`{"role":"\u0075ser"}`, false},
		{`{"x":"a\/b"}`, false},
		{`{"x":"\u00e9"}`, false},
		{`{"x":"\ud83d\ude00"}`, false},
		{`{"x":"\u001F"}`, false},
		{`{"x":1,"x":2}`, false},
		{`{"a":{"x":1,"x":2}}`, false},
		{`{"role":"a","role":"b"}`, false},
		{`["role"]`, false},
		{`"x"`, false},
		// Invalid.
		{`{"x":01}`, false},
		{`{"x":1.}`, false},
		{`{"x":1e}`, false},
		{`{"x":-}`, false},
		{`{"x":tru}`, false},
		{`{"x":nul}`, false},
		{`{"x":"a` + "\x01" + `"}`, false},
		{`{"x":"` + "\xff" + `"}`, false},
		{`{"x":"\q"}`, false},
		{`{"x":"\u12"}`, false},
		{`{"x":1`, false},
		{`{"x":[1,]}`, false},
		{`{"x":{"a":1,}}`, false},
		{`{"x":1}}`, false},
		{`{x:1}`, false},
		{`{"content":[{"type":"a"`, false},
		{``, false},
		{`{`, false},
	}
	for _, c := range cases {
		t.Run(c.in[:min(len(c.in), 40)], func(t *testing.T) {
			for _, d := range []record.Decoder{{}, {ShareInput: true, ShareShort: true}} {
				_, ok := d.DecodeShape([]byte(c.in), testShape)
				require.Equal(t, c.ok, ok)
				checkShape(t, d, []byte(c.in))
			}
		})
	}
}

func TestDecodeShape_NilShape(t *testing.T) {
	m, ok := record.Decoder{}.DecodeShape([]byte(`{"a":1}`), nil)
	require.True(t, ok)
	require.Equal(t, 0, m.Len(), "a nil shape builds the map alone")
	_, ok = record.Decoder{}.DecodeShape([]byte(`{"a":01}`), nil)
	require.False(t, ok)
}

func TestDecodeShape_Limits(t *testing.T) {
	in := []byte(`{"a":[[{"b":1}]]}`)
	_, ok := record.Decoder{MaxDepth: 4}.DecodeShape(in, testShape)
	require.True(t, ok)
	_, ok = record.Decoder{MaxDepth: 3}.DecodeShape(in, testShape)
	require.False(t, ok, "too deep: Decode refuses it")
	_, err := record.Decoder{MaxDepth: 3}.Decode(in)
	require.Error(t, err)
	_, ok = record.Decoder{MaxBytes: len(in) - 1}.DecodeShape(in, testShape)
	require.False(t, ok, "too large")
	// Within the shape's built parts too.
	_, ok = record.Decoder{MaxDepth: 2}.DecodeShape([]byte(`{"role":[[1]]}`), testShape)
	require.False(t, ok)
}

// FuzzDecodeShape holds DecodeShape to a whole decode on any input.
func FuzzDecodeShape(f *testing.F) {
	addSeeds(f)
	f.Add([]byte(`{"role":"assistant","content":[{"type":"toolCall","id":"c1","content":[{"type":"image"}]}],"tool_calls":[{"function":{"name":"x"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkShape(t, record.Decoder{}, data)
		checkShape(t, record.Decoder{ShareInput: true, ShareShort: true}, data)
		checkShape(t, record.Decoder{MaxDepth: 3}, data)
		// A canonical encoding of whatever decodes is taken.
		if m, err := record.Decode(data); err == nil {
			js, err := record.MarshalJSON(m)
			require.NoError(t, err)
			checkShape(t, record.Decoder{}, js)
		}
	})
}
