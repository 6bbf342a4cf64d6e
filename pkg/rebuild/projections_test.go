package rebuild

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
)

// Sessions rebuilt on workers are those rebuilt one record at a time.
func TestProjections_SameAsInOrder(t *testing.T) {
	inputs := hostileRecords(t)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 40 {
		m := record.NewMap("role", "user", "content", fmt.Sprintf("message %d", i))
		if i%2 == 1 {
			m = record.NewMap("role", "assistant", "content", []any{record.NewMap("type", "text", "text", fmt.Sprintf("answer %d", i))})
		}
		data, err := record.MarshalJSON(m)
		require.NoError(t, err)
		inputs = append(inputs, data)
	}
	var recs []added
	for seq := uint64(1); seq <= 3000; seq++ {
		recs = append(recs, added{fmt.Sprintf("s%d", r.IntN(37)), seq, inputs[r.IntN(len(inputs))]})
	}
	want := map[string]*Session{}
	for _, rec := range recs {
		if want[rec.session] == nil {
			want[rec.session] = NewSession(projection.Options{}, store.DefaultLimits())
		}
		want[rec.session].Add(rec.seq, rec.data)
	}
	for _, workers := range []int{0, 1, 2, 5} {
		p := NewProjections(projection.Options{}, store.DefaultLimits(), workers)
		for _, rec := range recs {
			p.Add(rec.session, rec.seq, rec.data)
		}
		got := p.Close()
		require.Len(t, got, len(want), "%d workers", workers)
		for id, w := range want {
			g := got[id]
			require.NotNil(t, g, "session %s", id)
			require.Equal(t, w.Checkpoint(), g.Checkpoint(), "session %s, %d workers", id, workers)
			require.Equal(t, string(w.Proj.AppendJSON(nil)), string(g.Proj.AppendJSON(nil)), "session %s, %d workers", id, workers)
			require.Equal(t, w.Proj.Dropped(), g.Proj.Dropped(), "session %s, %d workers", id, workers)
		}
	}
}

func TestProjections_Empty(t *testing.T) {
	require.Empty(t, NewProjections(projection.Options{}, store.DefaultLimits(), 2).Close())
}
