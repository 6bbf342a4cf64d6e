package app

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
)

// The checkpoint stores a store writes through (store.Loader's
// SaveCheckpoint and store.BatchSaver) never replace a stored checkpoint
// with an older one: each is given a checkpoint, then older ones, one at
// a time and in a batch, and still holds the first; a newer one replaces
// it. On the JetStream key-value bucket of a real server: the instance's
// loader and the loader of stores that write only corrective checkpoints.
func TestCheckpointStores_NeverOlder(t *testing.T) {
	type saver interface {
		store.Loader
		store.BatchSaver
	}
	for _, tc := range []struct {
		name  string
		saver func(l *streamLoader) saver
		// writes says the store writes a plain (not corrective)
		// checkpoint at all.
		writes bool
	}{
		{"stream loader", func(l *streamLoader) saver { return l }, true},
		{"read-only loader", func(l *streamLoader) saver { return readOnly{l} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			js := natstest.JetStream(t)
			cps, err := bus.OpenCheckpoints(ctx, js, 1)
			require.NoError(t, err)
			l := &streamLoader{cps: cps}
			s := tc.saver(l)

			first := store.Checkpoint{From: 5, Seq: 20}
			require.NoError(t, cps.Put(ctx, "a", first)) // as the ingest's writer stores it
			for _, older := range []store.Checkpoint{{From: 5, Seq: 19}, {From: 4, Seq: 20}, {From: 1, Seq: 2}} {
				require.NoError(t, s.SaveCheckpoint(ctx, "a", older))
				require.NoError(t, s.SaveCheckpoints(ctx, maps.All(map[string]store.Checkpoint{"a": older})))
				got, ok, err := s.Checkpoint(ctx, "a")
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, first.Key(), got.Key(), "older %+v stored in place of %+v", older, first)
			}
			newer := store.Checkpoint{From: 5, Seq: 21}
			require.NoError(t, s.SaveCheckpoints(ctx, maps.All(map[string]store.Checkpoint{"a": newer})))
			got, ok, err := s.Checkpoint(ctx, "a")
			require.NoError(t, err)
			require.True(t, ok)
			if tc.writes {
				require.Equal(t, newer.Key(), got.Key(), "a newer checkpoint replaces the stored one")
			} else {
				require.Equal(t, first.Key(), got.Key(), "writes only corrective checkpoints")
			}
		})
	}
}
