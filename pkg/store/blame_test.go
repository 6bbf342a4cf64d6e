package store

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
)

// failingProjections makes the projections of a store fail on one
// record: always, or only on a projection that has been rendered, as one
// that re-renders a packed entry would.
type failingProjections struct {
	mu       sync.Mutex
	rendered map[*projection.Session]bool
	seq      uint64 // the record that fails
	always   bool
}

func (f *failingProjections) install(s *Store) {
	f.rendered = map[*projection.Session]bool{}
	s.applyHook = func(p *projection.Session, seq uint64, v any) {
		f.mu.Lock()
		fail := seq == f.seq && (f.always || f.rendered[p])
		f.mu.Unlock()
		if fail {
			panic("projection: packed message from seq 1 does not decode")
		}
		p.Apply(seq, v)
	}
}

// render renders a session, as a reader does, and notes its projection.
func (f *failingProjections) render(t *testing.T, s *Store, session string) {
	t.Helper()
	require.NoError(t, s.View(context.Background(), session, func(p *projection.Session) {
		f.mu.Lock()
		f.rendered[p] = true
		f.mu.Unlock()
		p.AppendJSON(nil)
	}))
}

func TestStore_PanicBlame(t *testing.T) {
	t.Run("a failure of what the projection held blames no record", func(t *testing.T) {
		l := newFakeLoader()
		s := newStore(t)
		s.Loader = l
		f := &failingProjections{}
		f.install(s)
		ingest(s, l, "a", userRecord("one"))
		ingest(s, l, "b", userRecord("other"))
		f.render(t, s, "a")
		f.render(t, s, "b")

		f.seq = l.lastSeq() + 1
		ingest(s, l, "a", userRecord("two: applied to a rendered projection, it fails"))
		ingest(s, l, "a", userRecord("three"))
		ingest(s, l, "b", userRecord("other again"))

		requireView(t, s, l, "a") // loaded again: two applies to a fresh projection
		requireView(t, s, l, "b")
		require.Empty(t, s.Rejected())
		f.render(t, s, "a")
		s.Evict("a")
		requireView(t, s, l, "a")
		require.Empty(t, s.Rejected())
		requireCacheConsistent(t, s)
	})

	t.Run("a record that fails on a fresh projection is quarantined", func(t *testing.T) {
		for _, loaded := range []bool{true, false} {
			l := newFakeLoader()
			s := newStore(t)
			s.Loader = l
			f := &failingProjections{always: true}
			f.install(s)
			ingest(s, l, "a", userRecord("one"))
			if loaded {
				f.render(t, s, "a")
			}
			f.seq = l.lastSeq() + 1
			bad := ingest(s, l, "a", userRecord("two: fails wherever it is applied"))
			ingest(s, l, "a", userRecord("three"))

			want := `[{"role":"user","content":"one"},{"role":"user","content":"three"}]`
			for range 2 {
				js, seq, _ := viewJSON(t, s, "a")
				require.Equal(t, want, js)
				require.Equal(t, bad+1, seq)
				require.Equal(t, []uint64{bad}, quarantinedSeqs(s), "listed once")
				s.Evict("a")
			}
			requireCacheConsistent(t, s)
		}
	})

	t.Run("a compaction that fails still restarts its session", func(t *testing.T) {
		// The ingest, the checkpoint and ctxd rebuild all restart the
		// session from the compaction (Limits.Resets): every load
		// shows the records after it, wherever it starts reading.
		l := newFakeLoader()
		s := newStore(t)
		s.Loader = l
		f := &failingProjections{always: true}
		f.install(s)
		ingest(s, l, "a", userRecord("one"))
		f.render(t, s, "a")
		f.seq = l.lastSeq() + 1
		bad := ingest(s, l, "a", compactionRecord("kept"))
		ingest(s, l, "a", userRecord("two"))
		require.NoError(t, s.SaveCheckpoints(context.Background()))

		want := `[{"role":"user","content":"two"}]`
		for range 2 {
			js, _, _ := viewJSON(t, s, "a")
			require.Equal(t, want, js)
			require.Equal(t, []uint64{bad}, quarantinedSeqs(s))
			s.Evict("a")
		}
		for _, cp := range []bool{true, false} {
			fresh := newStore(t)
			fresh.Loader = l
			f.install(fresh)
			fresh.Advance(l.lastSeq())
			if !cp {
				delete(l.checkpoints, "a") // the load scans from the start
			}
			js, _, _ := viewJSON(t, fresh, "a")
			require.Equal(t, want, js, "loaded with a checkpoint: %v", cp)
			require.Equal(t, []uint64{bad}, quarantinedSeqs(fresh))
		}
	})

	t.Run("without a Loader, a failed projection is an error, not a wrong view", func(t *testing.T) {
		s := newStore(t)
		f := &failingProjections{}
		f.install(s)
		s.Apply("a", 1, userRecord("one"))
		f.render(t, s, "a")
		f.seq = 2
		s.Apply("a", 2, userRecord("two"))
		s.Apply("b", 3, userRecord("other"))
		require.Error(t, s.View(context.Background(), "a", func(*projection.Session) {}))
		seq, n, ok := view(t, s, "b")
		require.True(t, ok)
		require.Equal(t, uint64(3), seq)
		require.Equal(t, 1, n)
	})
}
