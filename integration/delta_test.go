//go:build !slow

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/replytest"
	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/app"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/render"
)

// TestService_DeltaTurns plays a runtime's turns against a real ctxd with
// a client that keeps each session's last reply and asks against it
// (ctxdclient.Keeper): each turn publishes the session's next records and
// fetches at the last acknowledgement's sequence. Every reply the keeper
// puts back together is the whole reply byte for byte, and without its
// digest the reply of a request without the new fields (for a provider
// format, a rendering from scratch of the records); a raw delta against
// the reply before applies to the same. With a cache of about one
// session, sessions are evicted and loaded again between turns: the
// chains kept for deltas are the replies', whatever projection made them.
func TestService_DeltaTurns(t *testing.T) {
	for _, small := range []bool{false, true} {
		t.Run(map[bool]string{false: "kept", true: "evicted"}[small], func(t *testing.T) { testDeltaTurns(t, small) })
	}
}

func testDeltaTurns(t *testing.T, small bool) {
	a := startApp(t, t.TempDir(), func(cfg *app.Config) {
		if small {
			cfg.CacheBytes = 1 << 20
		}
	})
	c := newClient(t, a.URL())
	type session struct {
		id   string
		f    render.Format
		mp   bool
		g    *workload.Generator
		recs []projection.Record
		k    ctxdclient.Keeper
		prev []byte // the whole reply of the turn before
	}
	var all []*session
	for i, f := range render.Formats {
		for k, mp := range []bool{false, true} {
			all = append(all, &session{id: fmt.Sprintf("d%d", 2*i+k), f: f, mp: mp,
				g: workload.New(uint64(20+2*i+k), workload.Default.WithScreenshots(20<<10, 4))})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	turns := 15
	if testing.Short() {
		turns = 6
	}
	deltas := 0
	for turn := range turns {
		for _, s := range all {
			var recs []any
			if turn == 0 {
				recs = s.g.Session(20)
			} else {
				recs = s.g.Next()
			}
			var last uint64
			for _, v := range recs {
				last = c.publishValue(s.id, v, false)
				s.recs = append(s.recs, projection.Record{Seq: last, Value: v})
			}
			what := fmt.Sprintf("%s, turn %d, %s, msgpack %v", s.id, turn, s.f, s.mp)
			req := ctxdclient.Request{MinSeq: last, WaitMS: 10000, Format: string(s.f), Msgpack: s.mp}
			got, err := s.k.Context(ctx, c.nc, s.id, req)
			require.NoError(t, err, what)
			r, err := protocol.ReadReply(got)
			require.NoError(t, err, what)
			require.Equal(t, last, r.Seq, what)

			plainReq := req
			plainReq.MinSeq, plainReq.NoDigest = r.Seq, true
			plain, err := ctxdclient.Context(ctx, c.nc, s.id, plainReq)
			require.NoError(t, err, what)
			require.Equal(t, string(plain), string(dropDigest(t, got)), "%s: without its digest, the reply of protocol 3.4", what)
			if s.f != render.Neutral && !s.mp {
				requireRendering(t, what, s.id, s.f, s.recs, plain)
			}
			if s.prev != nil {
				// What the instance sends against the reply before, raw.
				p, err := protocol.ReadReply(s.prev)
				require.NoError(t, err)
				rawReq := req
				rawReq.HaveSeq, rawReq.HaveDigest = p.Seq, p.Digest
				raw, err := ctxdclient.Context(ctx, c.nc, s.id, rawReq)
				require.NoError(t, err, what)
				full, err := protocol.ApplyDelta(s.prev, raw)
				require.NoError(t, err, what)
				require.Equal(t, string(got), string(full), what)
				if d, _ := protocol.ReadReply(raw); d.HasDelta {
					deltas++
				}
			}
			s.prev = got
		}
	}
	t.Logf("%d deltas in %d turns of %d sessions; %d evictions", deltas, turns-1, len(all), a.Stats().Evictions)
	if small {
		require.Positive(t, a.Stats().Evictions)
	}
	require.Positive(t, deltas)
}

// dropDigest checks a whole reply's digest and returns the reply
// without it (replytest.Plain).
func dropDigest(t *testing.T, b []byte) []byte {
	t.Helper()
	plain, err := replytest.Plain(b)
	require.NoError(t, err)
	return plain
}
