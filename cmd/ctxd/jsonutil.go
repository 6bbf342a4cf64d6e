package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
)

// jsonMarshal encodes plain Go structs such as reports and replies.
func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// writeJSON writes one encoded JSON value and a newline to standard
// output: indented for a person at a terminal, as it is (compact) for a
// pipe or a file.
func (e *env) writeJSON(data []byte) error {
	terminal := isTerminal
	if e.terminal != nil {
		terminal = e.terminal
	}
	if terminal(e.stdout) {
		var b bytes.Buffer
		if err := json.Indent(&b, data, "", "  "); err == nil {
			data = b.Bytes()
		}
	}
	// Not appended to: a reply of hundreds of MiB would be copied.
	if _, err := e.stdout.Write(data); err != nil {
		return err
	}
	_, err := e.stdout.Write([]byte{'\n'})
	return err
}
