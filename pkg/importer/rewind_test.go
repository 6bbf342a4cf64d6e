package importer

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
)

// A rewind's compaction gives the context of the records up to the
// fork, through a tool's own compaction among them too.
func TestRewind(t *testing.T) {
	for _, c := range []struct {
		format Format
		file   string
	}{
		{Pi, "testdata/pi/session-01.jsonl"},
		{Pi, "testdata/pi/before-compaction.jsonl"},
		{ClaudeCode, "testdata/claude-code/dag_compact_after_rewind.jsonl"},
	} {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile(c.file)
			require.NoError(t, err)
			ts, err := ParseBytes(c.format, c.file, data)
			require.NoError(t, err)
			tr := ts[0]
			for _, n := range []int{0, 1, len(tr.Records) / 2, len(tr.Records)} {
				r, err := Rewind(tr, n, "x", 3)
				require.NoError(t, err)
				require.Equal(t, RewindID+"x", r.ID)
				require.Equal(t, "compaction", r.Class())
				v := r.Value()
				pv, _ := v.Get("plannerVersion")
				require.Equal(t, int64(0), pv)
				var before []any
				for i := range tr.Records[:n] {
					before = append(before, tr.Records[i].Value())
				}
				want := projection.Build(projection.Numbered(before), projection.Options{}).Messages
				got := projection.Build(projection.Numbered([]any{v}), projection.Options{}).Messages
				require.Equal(t, want, got, "rewind to record %d", n)
			}
			_, err = Rewind(tr, len(tr.Records)+1, "x", 1)
			require.Error(t, err)
		})
	}
}
