package inspect_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/sessiongen"
	"github.com/ctxd/ctxd/pkg/inspect"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// TestLoad_AtEverySeq checks "view at sequence N" against
// projection.Build of the session's records up to N, for every N of
// generated sessions stored in a real stream among other sessions'
// records, and the latest view against what the service answers.
func TestLoad_AtEverySeq(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	src := in.app.InspectSource()
	cfg := in.app.InspectConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for s := range 3 {
		r := rand.New(rand.NewPCG(uint64(s+1), 99))
		g := sessiongen.New(r, sessiongen.Rules{Convert: projection.Convert, IsValidCompaction: projection.IsValidCompaction})
		id := fmt.Sprintf("gen-%d", s)
		var recs []projection.Record
		var first uint64
		for _, v := range g.Session(40) {
			data, err := record.MarshalJSON(v)
			require.NoError(t, err)
			seq := in.publish("transcripts."+id, data)
			if first == 0 {
				first = seq
			}
			in.publish("transcripts.noise", `{"role":"user","content":"between"}`)
			if m, ok := v.(*record.Map); ok {
				// The store skips what is not a map: so does Build's input.
				recs = append(recs, projection.Record{Seq: seq, Value: m})
			}
			// Every sequence up to this one, the other session's included.
			for at := max(seq-1, 1); at <= seq; at++ { // at 0 would ask for the latest
				view, err := inspect.Load(ctx, src, id, at, cfg)
				if at < first {
					require.ErrorIs(t, err, inspect.ErrNoSession)
					continue
				}
				require.NoError(t, err)
				var upTo []projection.Record
				for _, r := range recs {
					if r.Seq <= at {
						upTo = append(upTo, r)
					}
				}
				requireSameContext(t, projection.Build(upTo, cfg.Options), view, fmt.Sprintf("session %s at %d", id, at))
			}
		}
		// The latest view is what the service answers.
		view, err := inspect.Load(ctx, src, id, 0, cfg)
		require.NoError(t, err)
		var live []any
		var seq uint64
		in.app.Store().View(ctx, id, func(p *projection.Session) {
			live, seq = append(live, p.Messages()...), p.Seq()
		})
		require.Equal(t, seq, view.Seq)
		a, _ := record.MarshalJSON(live)
		b, _ := record.MarshalJSON(view.Messages)
		require.JSONEq(t, string(a), string(b))
	}
}

func requireSameContext(t *testing.T, want projection.Result, v *inspect.View, msg string) {
	t.Helper()
	a, err := record.MarshalJSON(want.Messages)
	require.NoError(t, err)
	b, err := record.MarshalJSON(v.Messages)
	require.NoError(t, err)
	require.Equal(t, string(a), string(b), msg)
	require.True(t, reflect.DeepEqual(want.Dropped, v.Dropped), msg)
}
