package rebuild

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ctxd/ctxd/pkg/record"
)

// compactionFields returns the members of a valid compaction, in order.
func compactionFields() []any {
	return []any{
		"type", "compaction",
		"at", "2026-01-02T03:04:05.000Z",
		"baseSeq", int64(12),
		"plannerVersion", int64(1),
		"summaryModelRef", "claude-haiku-4-5",
		"summary", "the login button was wired to handleSubmit",
		"qualityAudit", "passed",
		"messages", []any{record.NewMap("role", "user", "content", "fix the login button")},
		"firstKeptIndex", int64(1),
		"tokensBefore", int64(150000),
		"tokensAfter", int64(12000),
	}
}

// compactionVariants returns records that are valid compactions and
// records that nearly are, so that both answers are exercised.
func compactionVariants() []*record.Map {
	valid := record.NewMap(compactionFields()...)
	out := []*record.Map{valid}
	with := func(key string, v any) *record.Map {
		m := valid.Clone()
		m.Set(key, v)
		return m
	}
	out = append(out,
		with("qualityAudit", "disabled"),
		with("handover", record.NewMap("next", "run the tests")),
		with("audit", record.NewMap("score", int64(3))),
		with("tokensBefore", record.Number("1.5e5")),
		// Invalid ones.
		with("type", "Compaction"),
		with("type", "compaction "),
		with("qualityAudit", "failed"),
		with("handover", nil),
		with("audit", "no"),
		with("baseSeq", record.Number("1.5")),
		with("messages", "none"),
		with("at", int64(3)),
	)
	for i := 0; i < len(compactionFields()); i += 2 {
		m := record.NewMap(append(compactionFields()[:i:i], compactionFields()[i+2:]...)...)
		out = append(out, m) // one field missing
	}
	// The word elsewhere than as the type.
	out = append(out,
		record.NewMap("role", "user", "content", "the compaction ran twice"),
		record.NewMap("role", "user", "content", []any{valid}),
		record.NewMap("type", "message", "compaction", true),
	)
	return out
}

// escapeLetters writes the given letters of JSON strings as \u escapes:
// equal values, other bytes.
func escapeLetters(data []byte, word string, every bool) []byte {
	var esc bytes.Buffer
	for i, c := range []byte(word) {
		if every || i%3 == 1 {
			fmt.Fprintf(&esc, `\u%04x`, c)
		} else {
			esc.WriteByte(c)
		}
	}
	return bytes.ReplaceAll(data, []byte(`"`+word+`"`), []byte(`"`+esc.String()+`"`))
}

// hostileRecords returns encodings of the variants as JSON (plain, with
// escaped keys and values, with white space) and msgpack, and inputs that
// are no record at all.
func hostileRecords(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	for _, m := range compactionVariants() {
		js, err := record.MarshalJSON(m)
		if err != nil {
			t.Fatal(err)
		}
		mp, err := record.MarshalMsgpack(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, js, mp,
			escapeLetters(js, "compaction", true),
			escapeLetters(js, "compaction", false),
			escapeLetters(js, "type", true),
			escapeLetters(escapeLetters(js, "type", false), "compaction", true),
			append([]byte(" \n\t"), js...),
			bytes.ReplaceAll(js, []byte(`"compaction"`), []byte(`"compac\/tion"`)),
			bytes.ReplaceAll(js, []byte(`"compaction"`), []byte(`"compaction\u0000"`)),
			js[:len(js)/2], mp[:len(mp)/2],
		)
	}
	out = append(out,
		nil, []byte{}, []byte("{"), []byte(`"compaction"`), []byte(`["compaction"]`),
		[]byte(`{"type":"compaction"}`), []byte(`{"type":"compaction"} x`),
		[]byte(`{"type":"\u0063ompaction","type":"compaction"}`),
		[]byte("\xaacompaction"), // a bare msgpack str
		[]byte{0x81, 0xa4, 't', 'y', 'p', 'e', 0xc4, 0x0a, 'c', 'o', 'm', 'p', 'a', 'c', 't', 'i', 'o', 'n'}, // type as bin
		[]byte("{\"type\":\"compaction\xff\"}"),
	)
	return out
}

// mutate returns a copy of data with a few bytes changed, cut or doubled.
func mutate(r *rand.Rand, data []byte) []byte {
	out := bytes.Clone(data)
	for range 1 + r.IntN(3) {
		if len(out) == 0 {
			return out
		}
		i := r.IntN(len(out))
		switch r.IntN(4) {
		case 0:
			out[i] = byte(r.Uint32())
		case 1:
			out = out[:i]
		case 2:
			out = append(out[:i:i], out[i+1:]...)
		default:
			out = append(out[:i+1:i+1], out[i:]...)
		}
	}
	return out
}
