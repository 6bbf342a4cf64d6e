package importer

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

// checkTranscript checks what every conversion promises: a valid session
// id, unique record ids, places named, records that encode and decode back
// to themselves, and compactions that ctxd takes as valid.
func checkTranscript(tr *Transcript) error {
	if err := subject.CheckSession(tr.Session); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, r := range tr.Records {
		if r.ID == "" || seen[r.ID] {
			return fmt.Errorf("record %d: id %q empty or repeated", i, r.ID)
		}
		seen[r.ID] = true
		if r.Where == "" {
			return fmt.Errorf("record %d (%s): no place", i, r.ID)
		}
		b, err := r.JSON()
		if err != nil {
			return fmt.Errorf("record %d (%s): %w", i, r.ID, err)
		}
		back, err := record.Decoder{MaxBytes: len(b) + 1, MaxDepth: 1 << 20}.Decode(b)
		if err != nil {
			return fmt.Errorf("record %d (%s) does not decode: %w", i, r.ID, err)
		}
		if !record.Equal(back, r.Value()) {
			return fmt.Errorf("record %d (%s) changes through JSON", i, r.ID)
		}
		if r.Class() == "compaction" && !projection.IsValidCompaction(r.Value()) {
			return fmt.Errorf("record %d (%s): an invalid compaction: %s", i, r.ID, b)
		}
	}
	total := 0
	for _, n := range tr.Report.Records {
		total += n
	}
	if total != len(tr.Records) {
		return fmt.Errorf("the report counts %d records, there are %d", total, len(tr.Records))
	}
	return nil
}

// checkError checks that a failed conversion names the file.
func checkError(name string, err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return fmt.Errorf("%T is not an *Error: %v", err, err)
	}
	if e.Name != name || !strings.HasPrefix(err.Error(), name+": ") {
		return fmt.Errorf("error %q does not start with the file name %q", err, name)
	}
	return nil
}

func mustReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}
