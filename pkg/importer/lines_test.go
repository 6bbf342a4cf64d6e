package importer

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

// What a conversion does with a line it cannot decode: never leave out
// the records around it. Invalid UTF-8 in a string is replaced and said;
// any other line that does not decode fails the file, naming the line.

// withByte returns data with b inserted at the start of the text of the
// first text block of line n (from 1).
func withByte(t *testing.T, data []byte, n int, b string) (out []byte, at int) {
	t.Helper()
	lines := bytes.Split(data, []byte("\n"))
	line := lines[n-1]
	i := bytes.Index(line, []byte(`"text":"`))
	require.Positive(t, i, "line %d has no text block", n)
	i += len(`"text":"`)
	lines[n-1] = append(append(append([]byte{}, line[:i]...), b...), line[i:]...)
	return bytes.Join(lines, []byte("\n")), i
}

func TestParse_InvalidUTF8(t *testing.T) {
	path := filepath.Join("testdata", "claude-code", "full-session-two.jsonl")
	data := mustReadFile(t, path)
	want, err := Parse(ClaudeCode, path, bytes.NewReader(data))
	require.NoError(t, err)
	require.Len(t, want[0].Records, 35)
	bad, at := withByte(t, data, 17, "\xff")
	require.NotEqual(t, data, bad)

	for _, f := range []Format{ClaudeCode, Auto} {
		t.Run(string(f), func(t *testing.T) {
			ts, err := Parse(f, path, bytes.NewReader(bad))
			require.NoError(t, err)
			require.Len(t, ts, 1)
			tr := ts[0]
			require.NoError(t, checkTranscript(tr))
			require.Empty(t, tr.Report.Unknown)
			require.Zero(t, tr.Report.Abandoned, "the chain goes on across the line")
			require.Len(t, tr.Records, len(want[0].Records))
			for i := range tr.Records {
				require.Equal(t, want[0].Records[i].ID, tr.Records[i].ID)
			}
			require.Equal(t, []Note{{"line 17", fmt.Sprintf("invalid UTF-8 replaced with U+FFFD: 1 byte, at byte %d", at), 1}}, tr.Report.Approximations)
			var text string
			for _, r := range tr.Records {
				if r.Where == "line 17" {
					b, err := r.JSON()
					require.NoError(t, err)
					text = string(b)
				}
			}
			require.Contains(t, text, "\"text\":\"\uFFFDI can see")
		})
	}
	requireSameConversion(t, bad, ClaudeCode)
	long, _ := withByte(t, data, 17, "\xff"+strings.Repeat("x", 300))
	requireSameConversion(t, long, ClaudeCode)
}

// deep is a JSON object nested deeper than the decoder's limit.
var deep = `{"type":"user","x":` + strings.Repeat("[", record.DefaultMaxDepth+1) + strings.Repeat("]", record.DefaultMaxDepth+1) + `}`

func TestParse_UndecodableLine(t *testing.T) {
	cases := []struct {
		format Format
		lines  []string
	}{
		{ClaudeCode, []string{
			`{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s","message":{"role":"user","content":"one"}}`,
			`{"type":"assistant","uuid":"a1","parentUuid":"u1","sessionId":"s","message":{"id":"m1","content":[{"type":"text","text":"two"}]}}`,
			`{"type":"user","uuid":"u2","parentUuid":"a1","sessionId":"s","message":{"role":"user","content":"three"}}`,
			`{"type":"assistant","uuid":"a2","parentUuid":"u2","sessionId":"s","message":{"id":"m2","content":[{"type":"text","text":"four"}]}}`,
		}},
		{Codex, []string{
			`{"type":"session_meta","payload":{"id":"c1","timestamp":"2026-01-01T00:00:00Z"}}`,
			`{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"one"}]}}`,
			`{"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"two"}]}}`,
			`{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"three"}]}}`,
		}},
		{Pi, []string{
			`{"type":"session","version":3,"id":"p"}`,
			`{"type":"message","id":"e1","parentId":null,"message":{"role":"user","content":"one"}}`,
			`{"type":"message","id":"e2","parentId":"e1","message":{"role":"assistant","content":[{"type":"text","text":"two"}]}}`,
			`{"type":"message","id":"e3","parentId":"e2","message":{"role":"user","content":"three"}}`,
		}},
		{Gemini, []string{
			`{"sessionId":"g","projectHash":"h"}`,
			`{"id":"u1","type":"user","content":"one"}`,
			`{"id":"a1","type":"gemini","content":"two"}`,
			`{"id":"u2","type":"user","content":"three"}`,
		}},
	}
	bad := []struct {
		name, line string
		err        error
	}{
		{"nested too deep", deep, record.ErrTooDeep},
		{"not JSON", `{"type":"user","uuid":"u9",`, record.ErrTruncated},
		{"a syntax error", `{"type":"user" "uuid":"u9"}`, record.ErrSyntax},
		{"invalid UTF-8 outside a string", "{\"type\":\"user\",\xff\"uuid\":\"u9\"}", record.ErrSyntax},
	}
	for _, c := range cases {
		for _, b := range bad {
			t.Run(string(c.format)+"/"+b.name, func(t *testing.T) {
				lines := append(append(append([]string{}, c.lines[:3]...), b.line), c.lines[3:]...)
				data := []byte(strings.Join(lines, "\n") + "\n")
				for _, f := range []Format{c.format, Auto} {
					ts, err := Parse(f, "t.jsonl", bytes.NewReader(data))
					require.Error(t, err, "%s: %d records", f, recordsOf(ts))
					require.NoError(t, checkError("t.jsonl", err))
					var e *Error
					require.ErrorAs(t, err, &e)
					require.Equal(t, "line 4", e.Where, "%v", err)
					require.ErrorIs(t, err, b.err)
					require.Contains(t, err.Error(), "t.jsonl: line 4: does not decode: json at byte ")
				}
				if c.format == ClaudeCode || c.format == Pi {
					requireSameConversion(t, data, c.format)
				}
			})
		}
	}
	t.Run("the first of several, whatever the chunks", func(t *testing.T) {
		var lines []string
		for i := range 2000 {
			lines = append(lines, fmt.Sprintf(`{"type":"user","uuid":"u%d","message":{"role":"user","content":"%s"}}`, i, strings.Repeat("x", 1000)))
		}
		lines[1500], lines[1700] = deep, "nope"
		_, err := Parse(ClaudeCode, "t.jsonl", strings.NewReader(strings.Join(lines, "\n")))
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, "line 1501", e.Where)
		require.ErrorIs(t, err, record.ErrTooDeep)
	})
	t.Run("invalid UTF-8 before what is wrong: the error is what is wrong, where the line has it", func(t *testing.T) {
		line := "{\"type\":\"user\",\"c\":\"\xff\xfe\" \"uuid\":\"u9\"}"
		lines := append(append([]string{}, cases[0].lines[:2]...), line)
		_, err := Parse(ClaudeCode, "t.jsonl", strings.NewReader(strings.Join(lines, "\n")))
		require.ErrorIs(t, err, record.ErrSyntax)
		require.Contains(t, err.Error(), fmt.Sprintf("t.jsonl: line 3: does not decode: json at byte %d: ", strings.Index(line, `"uuid"`)))
	})
	t.Run("a last line cut short says the file may be being written", func(t *testing.T) {
		cut := strings.Join(cases[0].lines, "\n")
		cut = cut[:len(cut)-10]
		_, err := Parse(ClaudeCode, "t.jsonl", strings.NewReader(cut))
		require.ErrorIs(t, err, record.ErrTruncated)
		require.Contains(t, err.Error(), "t.jsonl: line 4: does not decode: ")
		require.Contains(t, err.Error(), "the file ends inside it: if the tool is writing it, import the file again once it has")
		_, err = Parse(ClaudeCode, "t.jsonl", strings.NewReader(cut+"\n"))
		require.ErrorIs(t, err, record.ErrTruncated)
		require.NotContains(t, err.Error(), "ends inside it")
	})
	t.Run("a line that is JSON but not an object is reported, not fatal", func(t *testing.T) {
		lines := append(append([]string{}, cases[0].lines[:2]...), `[1,2]`, cases[0].lines[2])
		ts, err := Parse(ClaudeCode, "t.jsonl", strings.NewReader(strings.Join(lines, "\n")))
		require.NoError(t, err)
		require.Equal(t, []Note{{"line 3", "a JSON array, not an object", 1}}, ts[0].Report.Unknown)
		require.Len(t, ts[0].Records, 3)
	})
}

func recordsOf(ts []*Transcript) int {
	n := 0
	for _, t := range ts {
		n += len(t.Records)
	}
	return n
}

// An OpenHands event file that does not decode fails the conversation,
// naming the file; invalid UTF-8 in one is replaced and said.
func TestParseFS_UndecodableEvent(t *testing.T) {
	ev := func(id, text string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(`{"id":"` + id + `","kind":"MessageEvent","source":"user","llm_message":{"role":"user","content":[{"type":"text","text":"` + text + `"}]}}`)}
	}
	fsys := fstest.MapFS{
		"events/event-00001-a.json": ev("a", "one"),
		"events/event-00002-b.json": {Data: []byte(deep)},
		"events/event-00003-c.json": ev("c", "three"),
	}
	_, err := ParseFS(OpenHands, fsys, "conv")
	require.NoError(t, checkError("conv", err))
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "event-00002-b.json: line 1", e.Where)
	require.ErrorIs(t, err, record.ErrTooDeep)

	fsys["events/event-00002-b.json"] = ev("b", "tw\xffo")
	ts, err := ParseFS(OpenHands, fsys, "conv")
	require.NoError(t, err)
	require.Len(t, ts[0].Records, 3)
	require.Equal(t, "event-00002-b.json", ts[0].Report.Approximations[0].Where)
	require.Contains(t, ts[0].Report.Approximations[0].Text, "invalid UTF-8")
}

// A Gemini chat file is one JSON value: invalid UTF-8 in it is replaced,
// and an error in it is named by its line.
func TestParse_GeminiChatFile(t *testing.T) {
	path := filepath.Join("testdata", "gemini", "session-2025-10-27T19-55-981c87cb.json")
	data := mustReadFile(t, path)
	want, err := Parse(Gemini, path, bytes.NewReader(data))
	require.NoError(t, err)
	i := bytes.Index(data, []byte(`"content": "`))
	require.Positive(t, i)
	i += len(`"content": "`)
	line := bytes.Count(data[:i], []byte("\n")) + 1
	bad := append(append(append([]byte{}, data[:i]...), '\xff'), data[i:]...)
	for _, f := range []Format{Gemini, Auto} {
		ts, err := Parse(f, path, bytes.NewReader(bad))
		require.NoError(t, err)
		require.Len(t, ts[0].Records, len(want[0].Records))
		require.Len(t, ts[0].Report.Approximations, len(want[0].Report.Approximations)+1)
		require.Equal(t, fmt.Sprintf("line %d", line), ts[0].Report.Approximations[0].Where)
	}
	broken := append(append(append([]byte{}, data[:i]...), "\"x\" 1"...), data[i:]...)
	for _, f := range []Format{Gemini, Auto} {
		_, err := Parse(f, path, bytes.NewReader(broken))
		require.NoError(t, checkError(path, err))
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, fmt.Sprintf("line %d", line), e.Where, "%v", err)
		require.ErrorIs(t, err, record.ErrSyntax)
	}
}

// Auto detection names what is wrong with a first line that does not
// decode, rather than calling the format unknown.
func TestDetect_Undecodable(t *testing.T) {
	cc := `{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s","message":{"role":"user","content":"one"}}`
	cases := []struct {
		name, data string
		where      string
		err        error
	}{
		{"a first line nested too deep", deep + "\n" + cc + "\n", "line 1", record.ErrTooDeep},
		{"after blank lines", "\n\n" + deep + "\n" + cc + "\n", "line 3", record.ErrTooDeep},
		{"a first line cut short", `{"type":"user","uuid":"u1"` + "\n" + cc + "\n", "line 1", record.ErrTruncated},
		{"a later line nested too deep", `{"a":1}` + "\n" + deep + "\n" + cc + "\n", "line 2", record.ErrTooDeep},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(Auto, "t.jsonl", strings.NewReader(c.data))
			require.NoError(t, checkError("t.jsonl", err))
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, c.where, e.Where, "%v", err)
			require.ErrorIs(t, err, c.err)
			require.NotContains(t, err.Error(), "not recognised")
		})
	}
	t.Run("a first line with invalid UTF-8 in a string", func(t *testing.T) {
		f, err := Detect([]byte(strings.Replace(cc, "one", "o\xffne", 1)))
		require.NoError(t, err)
		require.Equal(t, ClaudeCode, f)
	})
	t.Run("text is not recognised, and says why", func(t *testing.T) {
		_, err := Parse(Auto, "t.txt", strings.NewReader("hello\nworld\n"))
		require.NoError(t, checkError("t.txt", err))
		require.Contains(t, err.Error(), "format not recognised")
		require.Contains(t, err.Error(), "line 1")
	})
}

// endless is a reader of zeros without end, like /dev/zero, that counts
// what was read and fails past limit bytes, so that a reader that reads
// it whole fails rather than takes the machine's memory.
type endless struct{ read, limit int }

func (z *endless) Read(p []byte) (int, error) {
	if z.read >= z.limit {
		return 0, fmt.Errorf("read %d bytes of an endless input", z.read)
	}
	p = p[:min(len(p), z.limit-z.read)]
	clear(p)
	z.read += len(p)
	return len(p), nil
}

func TestParse_LongLine(t *testing.T) {
	t.Run("an endless input without newlines", func(t *testing.T) {
		for _, f := range append([]Format{Auto}, Formats...) {
			if f == OpenHands {
				continue
			}
			z := &endless{limit: 4 * DefaultMaxLine}
			_, err := Parse(f, "zero", z)
			require.NoError(t, checkError("zero", err))
			require.ErrorIs(t, err, ErrLineTooLong, "%s", f)
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, "line 1", e.Where)
			require.Contains(t, err.Error(), fmt.Sprintf("zero: line 1: line too long: more than %d bytes", DefaultMaxLine))
			require.LessOrEqual(t, z.read, 2*DefaultMaxLine+64<<10, "read no further than needed")
		}
	})
	p := Parser{MaxLine: 1000}
	ok := `{"type":"user","uuid":"u1","message":{"role":"user","content":"one"}}`
	long := `{"type":"user","uuid":"u2","parentUuid":"u1","message":{"role":"user","content":"` + strings.Repeat("x", 1000) + `"}}`
	data := ok + "\n\n" + long + "\n" + ok + "\n"
	t.Run("a long line in a file", func(t *testing.T) {
		for _, read := range []func() ([]*Transcript, error){
			func() ([]*Transcript, error) { return p.Parse(ClaudeCode, "t.jsonl", strings.NewReader(data)) },
			func() ([]*Transcript, error) { return p.Parse(Auto, "t.jsonl", strings.NewReader(data)) },
			func() ([]*Transcript, error) { return p.ParseBytes(ClaudeCode, "t.jsonl", []byte(data)) },
			func() ([]*Transcript, error) {
				return p.Parse(ClaudeCode, "t.jsonl", io.MultiReader(strings.NewReader(data[:50]), strings.NewReader(data[50:])))
			},
		} {
			_, err := read()
			require.NoError(t, checkError("t.jsonl", err))
			require.ErrorIs(t, err, ErrLineTooLong)
			var e *Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, "line 3", e.Where)
		}
	})
	t.Run("a line of the limit is read", func(t *testing.T) {
		line := long[:len(long)-len(strings.Repeat("x", 1000))-3] + strings.Repeat("x", 1000-(len(long)-1000)) + `"}}`
		require.Len(t, line, 1000)
		for _, end := range []string{"\n", "\r\n", ""} {
			ts, err := p.Parse(ClaudeCode, "t.jsonl", strings.NewReader(ok+"\n"+line+end))
			require.NoError(t, err)
			require.Len(t, ts[0].Records, 2)
		}
	})
	t.Run("an event file", func(t *testing.T) {
		fsys := fstest.MapFS{"events/event-00001-a.json": {Data: []byte(`{"id":"a","kind":"MessageEvent","x":"` + strings.Repeat("y", 1000) + `"}`)}}
		_, err := p.ParseFS(OpenHands, fsys, "conv")
		require.ErrorIs(t, err, ErrLineTooLong)
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, "event-00001-a.json: line 1", e.Where)
	})
}

// endlessLines is an endless input of short valid lines, counting what was
// read and failing past limit bytes.
type endlessLines struct{ read, limit int }

func (z *endlessLines) Read(p []byte) (int, error) {
	if z.read >= z.limit {
		return 0, fmt.Errorf("read %d bytes of an endless input", z.read)
	}
	const line = `{"type":"user","uuid":"u","message":{"role":"user","content":"x"}}` + "\n"
	p = p[:min(len(p), z.limit-z.read)]
	for i := range p {
		p[i] = line[(z.read+i)%len(line)]
	}
	z.read += len(p)
	return len(p), nil
}

// A file is read whole before it is converted; MaxFile bounds it, so an
// endless input of valid lines is refused once past the bound, not read
// until the machine's memory runs out; a file known to be larger is
// refused before it is read.
func TestParse_LargeFile(t *testing.T) {
	p := Parser{MaxFile: 1 << 20}
	for _, f := range []Format{Auto, ClaudeCode, Codex, Pi} {
		z := &endlessLines{limit: 16 << 20}
		_, err := p.Parse(f, "endless", z)
		require.ErrorIs(t, err, ErrFileTooLarge, "%s", f)
		require.Contains(t, err.Error(), "endless: file too large: more than 1048576 bytes")
		require.LessOrEqual(t, z.read, 2<<20, "%s: read no further than needed", f)
	}
	_, err := p.ParseBytes(ClaudeCode, "big.jsonl", make([]byte, 1<<20+1))
	require.ErrorIs(t, err, ErrFileTooLarge)
	big := filepath.Join(t.TempDir(), "big.jsonl")
	require.NoError(t, os.WriteFile(big, bytes.Repeat([]byte("{}\n"), 1<<19), 0o600))
	file, err := os.Open(big)
	require.NoError(t, err)
	defer file.Close()
	_, err = p.Parse(ClaudeCode, big, file)
	require.ErrorIs(t, err, ErrFileTooLarge, "a file whose size says so, at once")
	fsys := fstest.MapFS{"events/event-00001-a.json": {Data: bytes.Repeat([]byte(" "), 1<<20+1)}}
	_, err = p.ParseFS(OpenHands, fsys, "conv")
	require.ErrorIs(t, err, ErrFileTooLarge, "an event file")
}
