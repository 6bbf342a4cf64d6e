package importer

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"testing/iotest"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// Fuzzing a parser: whatever the bytes, it never panics, fails only with
// an *Error naming the file, and what it converts keeps every promise of
// checkTranscript and builds a context.

// seedLines adds the first lines of each sample of a format, and the
// given snippets, as seeds.
func seedLines(f *testing.F, format Format, snippets ...string) {
	for _, smp := range samples {
		if smp.format != format {
			continue
		}
		full := filepath.Join("testdata", smp.path)
		if st, err := os.Stat(full); err != nil || st.IsDir() {
			continue
		}
		data, err := os.ReadFile(full)
		if err != nil {
			f.Fatal(err)
		}
		if len(data) > 32<<10 {
			lines := bytes.SplitAfter(data, []byte("\n"))
			data = bytes.Join(lines[:min(len(lines), 12)], nil)
			if len(data) > 32<<10 {
				data = data[:32<<10]
			}
		}
		f.Add(data)
	}
	for _, s := range snippets {
		f.Add([]byte(s))
	}
}

func fuzzParse(t *testing.T, format Format, data []byte) {
	const name = "fuzz.jsonl"
	ts, err := Parse(format, name, bytes.NewReader(data))
	if err != nil {
		if e := checkError(name, err); e != nil {
			t.Fatal(e)
		}
		return
	}
	for _, tr := range ts {
		if err := checkTranscript(tr); err != nil {
			t.Fatal(err)
		}
		projection.Build(projection.Numbered(values(tr)), projection.Options{})
	}
}

func FuzzClaudeCode(f *testing.F) {
	seedLines(f, ClaudeCode,
		`{"type":"user","uuid":"u1","parentUuid":"u1","message":{"role":"user","content":"loop"}}`,
		`{"type":"system","subtype":"compact_boundary","uuid":"cb","logicalParentUuid":"cb","compactMetadata":{"preservedSegment":{"headUuid":"cb","tailUuid":"cs"}}}`+"\n"+
			`{"type":"user","uuid":"cs","parentUuid":"cb","isCompactSummary":true,"message":{"content":[{"type":"text","text":"s"}]}}`,
		`{"type":"user","uuid":"x","isSidechain":true,"agentId":"a.b","sessionId":"s s","message":{"content":"hi"}}`,
		// Invalid UTF-8 in a line, short and past scanMin, and a line
		// nested too deep: what a real file can hold.
		`{"type":"user","uuid":"u1","message":{"content":"a`+"\xff"+`b"}}`+"\n"+`{"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"id":"m","content":[{"type":"text","text":"`+"\xc3"+strings.Repeat("x", 300)+`"}]}}`,
		`{"type":"user","uuid":"u1","message":{"content":"a"}}`+"\n"+`{"x":`+strings.Repeat("[", 130)+strings.Repeat("]", 130)+`}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzParse(t, ClaudeCode, data)
		requireSameConversion(t, data, ClaudeCode)
	})
}

func FuzzCodex(f *testing.F) {
	seedLines(f, Codex,
		`{"type":"event_msg","payload":{"type":"thread_rolled_back","num_turns":3}}`,
		`{"type":"compacted","payload":{"message":"m"}}`+"\n"+`{"type":"compacted","payload":{"message":"n","replacement_history":[{"type":"message","role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,AA"}]}]}}`,
		`{"id":"x","timestamp":"t"}`+"\n"+`{"type":"local_shell_call","id":"l1","action":{}}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzParse(t, Codex, data) })
}

func FuzzPi(f *testing.F) {
	seedLines(f, Pi,
		`{"type":"session","id":"p"}`+"\n"+`{"type":"compaction","summary":"s","firstKeptEntryIndex":0}`,
		`{"type":"session","version":2,"id":"p"}`+"\n"+`{"type":"message","id":"a","parentId":"a","message":{"role":"hookMessage"}}`,
		`{"type":"session","version":3,"id":"p"}`+"\n"+`{"type":"branch_summary","id":"b","summary":"x","timestamp":"2026-01-01T00:00:00Z"}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzParse(t, Pi, data)
		requireSameConversion(t, data, Pi)
	})
}

func FuzzGemini(f *testing.F) {
	seedLines(f, Gemini,
		`{"sessionId":"g"}`+"\n"+`{"id":"a","type":"user","content":"x"}`+"\n"+`{"$rewindTo":"zz"}`+"\n"+`{"$set":{"messages":[{"id":"a","type":"gemini","toolCalls":[{"id":"c","result":{"functionResponse":{}}}]}]}}`,
		`{"sessionId":"g","messages":[{"id":"m","type":"gemini","content":[{"inlineData":{"mimeType":"image/png","data":"AA"}},{"functionCall":{"id":"c","name":"n"}}]}]}`,
	)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzParse(t, Gemini, data) })
}

// FuzzOpenHands fuzzes two event files of a conversation directory.
func FuzzOpenHands(f *testing.F) {
	dir := "testdata/openhands/software-agent-sdk-v1_49_4_mcp/events"
	files, err := filepath.Glob(filepath.Join(dir, "event-*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for i := 0; i+1 < len(files); i++ {
		a, _ := os.ReadFile(files[i])
		b, _ := os.ReadFile(files[i+1])
		f.Add(a, b)
	}
	f.Add([]byte(`{"id":"c","kind":"Condensation","forgotten_event_ids":["c"],"summary":"s","summary_offset":-5}`), []byte(`{"id":"m","kind":"MessageEvent","llm_message":{"role":"user","content":[{"type":"image","image_urls":["http://x"]}]}}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		const name = "conv"
		fsys := fstest.MapFS{
			"events/event-00001-a.json": {Data: a},
			"events/event-00002-b.json": {Data: b},
		}
		ts, err := ParseFS(OpenHands, fsys, name)
		if err != nil {
			if e := checkError(name, err); e != nil {
				t.Fatal(e)
			}
			return
		}
		for _, tr := range ts {
			if err := checkTranscript(tr); err != nil {
				t.Fatal(err)
			}
			projection.Build(projection.Numbered(values(tr)), projection.Options{})
		}
	})
}

// FuzzDetect: detection never panics and names a format or fails.
func FuzzDetect(f *testing.F) {
	seedLines(f, ClaudeCode)
	seedLines(f, Pi,
		"{\"type\":\"session\",\"id\":\"\xff\"}",
		`{"x":`+strings.Repeat("[", 130)+strings.Repeat("]", 130)+`}`+"\n"+`{"type":"session","id":"p"}`,
		"{\n  \"sessionId\": \"g\",\n  \"messages\": [\"\xff\"]\n}\n",
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := Parse(Auto, "auto.jsonl", bytes.NewReader(data)); err != nil {
			if e := checkError("auto.jsonl", err); e != nil {
				t.Fatal(e)
			}
		}
	})
}

// FuzzReadLines: reading an input, in reads of any size, refuses a line
// longer than the limit exactly as checking the bytes does, naming the
// same line, and otherwise gives the input back. A line decoded with its
// invalid UTF-8 replaced is JSON the strict decoder takes.
func FuzzReadLines(f *testing.F) {
	f.Add([]byte("{}\n{\"a\":1}\r\n"), 7)
	f.Add([]byte("{\"x\":\"\xff\"}\r\n\n\r\r\n"), 8)
	f.Add([]byte("{\"type\":\"user\",\"uuid\":\"u\",\"message\":{\"content\":\"a\xc3\"}}"), 100)
	f.Fuzz(func(t *testing.T, data []byte, maxLine int) {
		maxLine = 1 + int(uint(maxLine)%64)
		want := checkLines(data, maxLine)
		for _, r := range []io.Reader{bytes.NewReader(data), iotest.OneByteReader(bytes.NewReader(data)), iotest.HalfReader(bytes.NewReader(data))} {
			got, err := readAll(r, maxLine, DefaultMaxFile)
			if want != nil {
				if err == nil || err.Error() != want.Error() || !errors.Is(err, ErrLineTooLong) {
					t.Fatalf("read: %v, checked: %v", err, want)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read %q, %v", got, err)
			}
		}
		eachLine(data, func(n int, line []byte) {
			v, fix, err := decodeLenient(line)
			strict, serr := lineDecoder.DecodeJSON(line)
			switch {
			case err != nil:
				if fix.bytes != 0 || serr == nil {
					t.Fatalf("line %d: %v, fix %+v, strict %v", n, err, fix, serr)
				}
			case fix.bytes == 0:
				if serr != nil || !record.Equal(v, strict) {
					t.Fatalf("line %d: lenient and strict differ on valid UTF-8", n)
				}
			default:
				b, err := record.MarshalJSON(v)
				if err != nil {
					t.Fatal(err)
				}
				if back, err := lineDecoder.DecodeJSON(b); err != nil || !record.Equal(back, v) {
					t.Fatalf("line %d: replaced, it does not encode back: %v", n, err)
				}
			}
		})
	})
}
