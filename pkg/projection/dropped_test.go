package projection

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/record"
)

// Dropped.Map is the report's JSON form, lists never null.
func TestDropped_Map(t *testing.T) {
	d := Dropped{
		UnpairedCalls: []UnpairedCall{{ID: "c1", Tool: "bash", Seq: 3}, {ID: "", Tool: "", Seq: 1 << 63}},
		OrphanResults: []OrphanResult{{ID: "o\"1", Seq: 7}},
		ImagesOmitted: 2,
	}
	want, err := json.Marshal(d)
	require.NoError(t, err)
	got, err := record.MarshalJSON(d.Map())
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got))

	got, err = record.MarshalJSON(Dropped{}.Map())
	require.NoError(t, err)
	require.Equal(t, `{"unpaired_calls":[],"orphan_results":[],"images_omitted":0}`, string(got))
}
