package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/stretchr/testify/require"
)

// browsingSession returns the records of a browsing session: a user's
// message, then n browser_use calls, each answered by a result with a
// PNG of pngBytes (its base64 a third larger).
func browsingSession(n, pngBytes int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	png := make([]byte, pngBytes)
	recs := [][]byte{userRecord("find the cheapest flight to Lisbon")}
	for i := range n {
		for k := range png {
			png[k] = byte(rng.Uint32())
		}
		recs = append(recs,
			fmt.Appendf(nil, `{"role":"assistant","content":[{"type":"toolCall","id":"c%d","name":"browser_use","arguments":{"action":"click","index":%d}}]}`, i, i),
			fmt.Appendf(nil, `{"role":"toolResult","toolCallId":"c%d","toolName":"browser_use","content":[{"type":"text","text":"clicked element %d"},{"type":"image","data":%q,"mimeType":"image/png"}]}`,
				i, i, base64.StdEncoding.EncodeToString(png)))
	}
	return recs
}

// A browsing session holds what its context can still need: the images
// of the screenshots the context has trimmed are let go as they are
// trimmed, and the store counts what is held, not what was read.
func TestStore_BrowsingSessionHoldsItsContext(t *testing.T) {
	l := newFakeLoader()
	s := New()
	s.Loader = l
	t.Cleanup(func() { s.Close() })
	recs := browsingSession(50, 75_000)
	read := 0
	for i, r := range recs {
		ingest(s, l, "b", r)
		read += len(r)
		if i == 0 {
			// Loaded: the records after this one are applied as they come.
			s.Advance(l.lastSeq())
			view(t, s, "b")
		}
	}
	s.Advance(l.lastSeq())
	held := s.Stats().Bytes

	var body []byte
	var snap int
	require.NoError(t, s.View(t.Context(), "b", func(p *projection.Session) {
		snap = len(p.AppendSnapshot(nil))
		body, _ = p.JSONBody()
	}))
	requireView(t, s, l, "b")
	ctxBytes := int64(len(body))
	viewed := s.Stats().Bytes
	t.Logf("records %d bytes; context %d bytes; held %d bytes (%.2fx) after the ingest, %d (%.2fx) after a view; snapshot %d bytes",
		read, ctxBytes, held, float64(held)/float64(ctxBytes), viewed, float64(viewed)/float64(ctxBytes), snap)
	// A session holds its messages about once, as the JSON of its
	// context, before its first view as after it: applying builds the
	// JSON rendering as the messages settle.
	require.LessOrEqual(t, viewed, ctxBytes*3/2, "held after a view, against the context's %d bytes", ctxBytes)
	require.LessOrEqual(t, held, ctxBytes*3/2, "held after the ingest, against the context's %d bytes", ctxBytes)
	require.Less(t, snap, 1<<20, "the snapshot fits a snapshot bucket's value")
}

// A browsing session, applied as it comes and never viewed since, gets
// its snapshot written at shutdown within a snapshot bucket's 1 MiB
// values, and the next load starts from it and shows Build.
func TestStore_BrowsingSessionSnapshotWritten(t *testing.T) {
	l := newFakeLoader()
	sl := newSnapLoader(l)
	sl.maxValue = 1 << 20
	s := snapStore(t, sl)
	for i, r := range browsingSession(50, 75_000) {
		ingest(s, l, "b", r)
		if i == 0 {
			s.Advance(l.lastSeq())
			requireView(t, s, l, "b") // loaded: the rest is applied as it comes
		}
	}
	s.Advance(l.lastSeq())
	require.Equal(t, 1, shutdown(t, s, sl), "the snapshot is written")
	require.NoError(t, s.Close())

	fresh := snapStore(t, sl)
	requireView(t, fresh, l, "b")
	require.Equal(t, uint64(1), fresh.Stats().SnapshotLoads, "the load starts from the snapshot")
}

// BenchmarkStore_BrowsingMemory measures what a browsing session holds:
// sessions of 50 screenshots of 75 KB each, applied as the service
// applies them (each record its own buffer, decoded sharing its
// strings), then viewed as JSON. It reports, per session, the context's
// bytes, the store's estimate (what --cache-bytes counts) and the heap
// after a collection, before and after the view, and the size of the
// snapshot taken before the view.
//
//	go test ./pkg/store -run '^$' -bench BrowsingMemory -benchtime 1x
func BenchmarkStore_BrowsingMemory(b *testing.B) {
	const sessions = 20
	recs := browsingSession(50, 75_000)
	for range b.N {
		s := New()
		s.Decoder = record.Decoder{ShareInput: true, ShareShort: true} // as the app's store
		var before, ingested, viewed runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for k := range sessions {
			id := fmt.Sprintf("b%d", k)
			for i, r := range recs {
				s.Apply(id, uint64(k*len(recs)+i+1), bytes.Clone(r))
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&ingested)
		held := s.Stats().Bytes
		var ctxBytes, snap int
		for k := range sessions {
			require.NoError(b, s.View(context.Background(), fmt.Sprintf("b%d", k), func(p *projection.Session) {
				snap = len(p.AppendSnapshot(nil)) // as ingested, before any rendering
				body, _ := p.JSONBody()
				ctxBytes = len(body) + 2
			}))
		}
		runtime.GC()
		runtime.ReadMemStats(&viewed)
		per := func(n int64) float64 { return float64(n) / sessions }
		b.ReportMetric(float64(ctxBytes), "ctx-B")
		b.ReportMetric(per(held), "est-B/session")
		b.ReportMetric(per(int64(ingested.HeapAlloc)-int64(before.HeapAlloc)), "heap-B/session")
		b.ReportMetric(per(s.Stats().Bytes), "viewed-est-B/session")
		b.ReportMetric(per(int64(viewed.HeapAlloc)-int64(before.HeapAlloc)), "viewed-heap-B/session")
		b.ReportMetric(float64(snap), "snapshot-B")
		runtime.KeepAlive(s)
	}
}
