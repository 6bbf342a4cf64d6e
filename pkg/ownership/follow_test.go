package ownership

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/store"
)

// hotRemovals is a removal watcher whose every check of the stream's
// state finds one more record of a session stored and applied while it
// read: a session its writer never leaves alone. A check verifies up to
// the stream's last sequence it read, that record's.
type hotRemovals struct {
	noRemovals
	st       *store.Store
	session  string
	last     atomic.Uint64
	verified atomic.Uint64
	checks   atomic.Int64
}

func (r *hotRemovals) publish() uint64 {
	seq := r.last.Add(1)
	r.st.Apply(r.session, seq, fmt.Appendf(nil, `{"role":"user","content":"m%d"}`, seq))
	return seq
}

// check reads the stream's state: one more record is stored and applied
// meanwhile, and verified.
func (r *hotRemovals) check(upTo uint64) {
	r.checks.Add(1)
	r.verified.Store(max(r.publish(), upTo))
}

func (r *hotRemovals) Cover(seq uint64) {
	if seq > r.verified.Load() {
		r.check(seq)
	}
}

func (r *hotRemovals) Covered(seq uint64) bool { return seq <= r.verified.Load() }

func (r *hotRemovals) Verified() uint64 { return r.verified.Load() }

func (r *hotRemovals) SettleSince(_ context.Context, _, upTo uint64) (uint64, error) {
	r.check(upTo)
	return r.verified.Load(), nil
}

// A follower's session written to faster than a check of the stream's
// state takes is still shown: a check proves the stream's last sequence
// it read, past the records the follower had applied when it began, so
// the next view finds the session within it. Both ways a view proves:
// with a check of its own (a session loaded since the last proof), and
// by the cover of the store's watermark.
func TestFollowed_HotSession(t *testing.T) {
	for _, clean := range []bool{false, true} {
		t.Run(fmt.Sprintf("clean=%v", clean), func(t *testing.T) {
			st := store.New()
			t.Cleanup(func() { st.Close() })
			r := &hotRemovals{st: st, session: "s"}
			for range 3 {
				r.publish()
			}
			fl := &follower{st: st}
			v := followed{fl: fl, st: st, removals: r, need: r.last.Load()}
			if clean {
				fl.clean.Store(st.Stats().Loads)
				v.known = true
			}
			var seq uint64
			require.NoError(t, v.View(context.Background(), "s", func(p *projection.Session) { seq = p.Seq() }))
			require.GreaterOrEqual(t, seq, uint64(3))
			require.LessOrEqual(t, r.checks.Load(), int64(2), "checks of the stream's state for one view")
		})
	}
}
