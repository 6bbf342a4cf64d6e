package importer

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

// A record kept as a value is encoded once: Size encodes it, and JSON
// returns those bytes.
func TestRecord_EncodedOnce(t *testing.T) {
	n := 0
	for _, s := range samples {
		for _, tr := range parseSample(t, s.path) {
			for i := range tr.Records {
				r := &tr.Records[i]
				if r.value == nil || r.raw != nil || r.parts != nil {
					continue
				}
				n++
				size, err := r.Size()
				require.NoError(t, err)
				want, err := record.MarshalJSON(r.Value())
				require.NoError(t, err)
				var b []byte
				allocs := testing.AllocsPerRun(3, func() { b, err = r.JSON() })
				require.NoError(t, err)
				require.Zero(t, allocs, "%s: %s: JSON encodes again", tr.Name, r.Where)
				require.Equal(t, want, b)
				require.Equal(t, size, len(b))
			}
		}
	}
	require.Positive(t, n, "the samples have records kept as values")
}
