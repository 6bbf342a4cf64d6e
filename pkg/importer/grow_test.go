package importer

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

// requireGrows checks that a conversion of a file's beginning and one of
// the whole file agree: a record of the beginning keeps its id and value in
// the whole, so that importing a file that grew publishes nothing twice.
// When the whole file left no branch, every record of the beginning is in
// the whole.
func requireGrows(t *testing.T, part, whole *Transcript) {
	t.Helper()
	byID := map[string]*record.Map{}
	for _, r := range whole.Records {
		byID[r.ID] = r.Value()
	}
	if len(part.Records) > 0 {
		require.Equal(t, whole.Session, part.Session)
	}
	for _, r := range part.Records {
		v, ok := byID[r.ID]
		if !ok {
			require.NotZero(t, whole.Report.Abandoned, "record %s (%s) of the beginning is not in the whole", r.ID, r.Where)
			continue
		}
		require.True(t, record.Equal(v, r.Value()), "record %s (%s) changed as the file grew", r.ID, r.Where)
	}
}

func TestGrownFile(t *testing.T) {
	for _, smp := range samples {
		full := filepath.Join("testdata", smp.path)
		if strings.HasSuffix(full, ".json") {
			continue // one JSON value: it is rewritten whole, never grown
		}
		t.Run(smp.path, func(t *testing.T) {
			whole := parseSample(t, smp.path)[0]
			if st, _ := os.Stat(full); st.IsDir() {
				files, err := fs.Glob(os.DirFS(full), "events/event-*.json")
				require.NoError(t, err)
				for k := 1; k < len(files); k++ {
					part := fstest.MapFS{}
					for _, f := range files[:k] {
						part[f] = &fstest.MapFile{Data: mustReadFile(t, filepath.Join(full, f))}
					}
					ts, err := ParseFS(smp.format, part, full)
					require.NoError(t, err)
					requireGrows(t, ts[0], whole)
				}
				return
			}
			data := mustReadFile(t, full)
			lines := bytes.SplitAfter(data, []byte("\n"))
			cuts := []int{1, 2, 3, len(lines) / 4, len(lines) / 2, len(lines) * 3 / 4, len(lines) - 1}
			if len(lines) < 60 {
				cuts = cuts[:0]
				for k := 1; k < len(lines); k++ {
					cuts = append(cuts, k)
				}
			}
			for _, k := range cuts {
				if k < 1 || k >= len(lines) {
					continue
				}
				part := bytes.Join(lines[:k], nil)
				ts, err := Parse(smp.format, full, bytes.NewReader(part))
				if err != nil {
					continue // the beginning holds no entry of the format yet
				}
				requireGrows(t, ts[0], whole)
			}
		})
	}
	t.Run("a gemini message written again with its result", func(t *testing.T) {
		lines := []string{
			`{"sessionId":"g2","projectHash":"h"}`,
			`{"id":"u1","type":"user","content":"go"}`,
			`{"id":"a1","type":"gemini","content":"","toolCalls":[{"id":"c1","name":"ls","args":{},"status":"executing"}]}`,
			`{"id":"a1","type":"gemini","content":"","toolCalls":[{"id":"c1","name":"ls","args":{},"status":"success","result":[{"functionResponse":{"id":"c1","name":"ls","response":{"output":"a"}}}]}]}`,
		}
		whole, err := Parse(Gemini, "g.jsonl", strings.NewReader(strings.Join(lines, "\n")))
		require.NoError(t, err)
		part, err := Parse(Gemini, "g.jsonl", strings.NewReader(strings.Join(lines[:3], "\n")))
		require.NoError(t, err)
		requireGrows(t, part[0], whole[0])
		require.Len(t, whole[0].Records, len(part[0].Records)+1, "the result arrives as a record of its own")
	})
}
