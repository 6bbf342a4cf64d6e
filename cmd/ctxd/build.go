package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

const buildAbout = `Reads records and prints the model context as one JSON array: the pure
function of CONTEXT.md, with no NATS involved. The input is FILE, or
standard input when FILE is absent or "-".

Input whose first non-space byte is '[' is one JSON array of records;
otherwise it is JSON lines, one record a line, blank lines skipped. Any JSON
value is a record (a line "null" is a record that contributes nothing).
Invalid input prints "line N: ..." to standard error, nothing to standard
output, and exits 1.

With --dropped the output is one JSON object instead:
  {"messages": [...], "dropped": {"unpaired_calls": [...], "orphan_results": [...], "images_omitted": N}}
where seq is the record's 1-based position in the input.

With --format F (anthropic, openai-chat, openai-responses, gemini) the
output is the body rendered for that provider (docs/RENDER.md), such as
{"system": [...], "messages": [...]} for anthropic; --dropped adds
"dropped" and "render", the report of what the rendering changed.`

func runBuild(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "build", "build [flags] [FILE]", buildAbout)
	dropped := fs.Bool("dropped", false, "print {\"messages\", \"dropped\"}: also report what the passes removed")
	browser := fs.String("browser-tools", strings.Join(projection.DefaultBrowserTools, ","), "comma-separated tool names whose screenshots are trimmed to the latest")
	maxBytes := fs.Int("max-record-bytes", record.DefaultMaxBytes, "largest record accepted, in bytes")
	format := fs.String("format", "neutral", "neutral, anthropic, openai-chat, openai-responses or gemini")
	pos, err := parse(e, fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fmt.Fprintf(e.stderr, "ctxd build: at most one FILE, got %d arguments\n", len(pos))
		return errUsage
	}
	in := e.stdin
	if len(pos) == 1 && pos[0] != "-" {
		name := pos[0]
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	f, err := checkFormat(e, "build", *format)
	if err != nil {
		return err
	}
	dec := record.Decoder{MaxBytes: *maxBytes}
	values, err := readRecords(in, dec)
	if err != nil {
		return err
	}
	if f != render.Neutral {
		return buildRendered(e, f, values, splitList(*browser), *dropped)
	}
	res := projection.Build(projection.Numbered(values), projection.Options{BrowserTools: splitList(*browser)})
	out, err := record.MarshalJSON(res.Messages)
	if err != nil {
		return fmt.Errorf("encode context: %w", err)
	}
	if *dropped {
		out, err = marshalWithDropped(out, res.Dropped)
		if err != nil {
			return err
		}
	}
	return e.writeJSON(out)
}

// marshalWithDropped wraps an encoded message array with the report.
func marshalWithDropped(messages []byte, d projection.Dropped) ([]byte, error) {
	rep, err := jsonMarshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode report: %w", err)
	}
	var b bytes.Buffer
	b.WriteString(`{"messages":`)
	b.Write(messages)
	b.WriteString(`,"dropped":`)
	b.Write(rep)
	b.WriteString(`}`)
	return b.Bytes(), nil
}

func splitList(s string) []string {
	out := []string{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// lineError names the input line (and column, when known) a record
// failed on.
type lineError struct {
	line, col int // col 0 when unknown
	err       error
}

func (e *lineError) Error() string {
	var de *record.DecodeError
	if errors.As(e.err, &de) {
		msg := fmt.Sprintf("line %d, column %d: %v", e.line, e.col, de.Err)
		if de.Detail != "" {
			msg += ": " + de.Detail
		}
		return msg
	}
	return fmt.Sprintf("line %d: %v", e.line, e.err)
}

func (e *lineError) Unwrap() error { return e.err }

// newLineError locates an error in a line decoded on its own.
func newLineError(line int, err error) *lineError {
	var de *record.DecodeError
	if errors.As(err, &de) {
		return &lineError{line, de.Offset + 1, err}
	}
	return &lineError{line, 0, err}
}

// readRecords reads one JSON array of records, or JSON lines.
func readRecords(r io.Reader, dec record.Decoder) ([]any, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, err
	}
	rest := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case len(rest) == 0:
		return []any{}, nil
	case rest[0] == '[':
		return readArray(data, dec)
	}
	return readLines(data, dec)
}

func readArray(data []byte, dec record.Decoder) ([]any, error) {
	// The array holds many records: its limits are their sum and one more
	// level of nesting.
	arrDec := record.Decoder{MaxBytes: max(len(data), 1), MaxDepth: dec.MaxDepth}
	if arrDec.MaxDepth <= 0 {
		arrDec.MaxDepth = record.DefaultMaxDepth
	}
	arrDec.MaxDepth++
	v, err := arrDec.DecodeJSON(data)
	if err != nil {
		var de *record.DecodeError
		if errors.As(err, &de) {
			line, col := position(data, de.Offset)
			return nil, &lineError{line, col, err}
		}
		return nil, &lineError{1, 0, err}
	}
	return v.([]any), nil
}

// readLines reads JSON lines, skipping blank ones.
func readLines(data []byte, dec record.Decoder) ([]any, error) {
	values := []any{}
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		v, err := dec.DecodeJSON(line)
		if err != nil {
			return nil, newLineError(n, err)
		}
		values = append(values, v)
	}
	return values, nil
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int) (line, col int) {
	off = min(off, len(data))
	line = 1 + bytes.Count(data[:off], []byte{'\n'})
	return line, off - bytes.LastIndexByte(data[:off], '\n')
}

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }
