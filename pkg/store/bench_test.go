package store

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/pkg/projection"
)

// benchRecords returns n records of a few shapes: user messages, tool
// calls and their results, and a compaction every compactEvery records
// (none when 0).
func benchRecords(n, compactEvery int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		switch {
		case compactEvery > 0 && i%compactEvery == compactEvery-1:
			out[i] = compactionRecord(fmt.Sprintf("kept %d", i))
		case i%3 == 0:
			out[i] = userRecord(fmt.Sprintf("message %d: the build fails on main", i))
		case i%3 == 1:
			out[i] = fmt.Appendf(nil, `{"role":"assistant","content":[{"type":"toolCall","id":"c%d","name":"bash","arguments":{"cmd":"go test ./..."}}]}`, i)
		default:
			out[i] = fmt.Appendf(nil, `{"role":"toolResult","toolCallId":"c%d","toolName":"bash","content":[{"type":"text","text":"ok"}]}`, i-1)
		}
	}
	return out
}

// BenchmarkStore_Apply measures the ingest's side: one record applied to
// its session, the way the consumer calls Apply.
func BenchmarkStore_Apply(b *testing.B) {
	const sessions = 100
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	run := func(b *testing.B, s *Store, recs [][]byte) {
		b.Helper()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			s.Apply(ids[i%sessions], uint64(i)+1, recs[i%len(recs)])
		}
	}

	b.Run("loaded", func(b *testing.B) {
		// Without a Loader every session stays loaded.
		run(b, New(), benchRecords(1024, 0))
	})
	b.Run("not loaded", func(b *testing.B) {
		l := newFakeLoader()
		s := New()
		s.Loader = l
		run(b, s, benchRecords(1024, 0))
	})
	b.Run("indexed, not loaded", func(b *testing.B) {
		// A Fresh store indexes every session: each index is written
		// behind the ingest, at most once a second.
		l := newFakeLoader()
		s := New()
		s.Loader = seqLoader{l}
		s.Fresh = true
		b.Cleanup(func() { s.Close() })
		run(b, s, benchRecords(1024, 0))
	})
	b.Run("compactions, not loaded", func(b *testing.B) {
		// A compaction every 50 records: its checkpoint is saved.
		l := newFakeLoader()
		s := New()
		s.Loader = l
		run(b, s, benchRecords(1000, 50))
	})
	b.Run("delivered again, not loaded", func(b *testing.B) {
		// The backlog of a restart: records every session has seen.
		l := newFakeLoader()
		s := New()
		s.Loader = l
		recs := benchRecords(1000, 50)
		const seen = 10000
		for j := range seen {
			s.Apply(ids[j%sessions], uint64(j)+1, recs[j%len(recs)])
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			j := i % seen
			s.Apply(ids[j%sessions], uint64(j)+1, recs[j%len(recs)])
		}
	})
	b.Run("loaded through a Loader", func(b *testing.B) {
		l := newFakeLoader()
		s := New()
		s.Loader = l
		recs := benchRecords(1000, 50)
		for i, id := range ids {
			ingest(s, l, id, recs[i])
			if err := s.View(context.Background(), id, func(*projection.Session) {}); err != nil {
				b.Fatal(err)
			}
		}
		first := l.lastSeq()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			data := recs[i%len(recs)]
			s.Apply(ids[i%sessions], first+uint64(i)+1, data)
		}
	})
}

// BenchmarkStore_View measures a reader: the session's JSON rendered
// under View, while it is cached.
func BenchmarkStore_View(b *testing.B) {
	s := New()
	for i, data := range benchRecords(200, 0) {
		s.Apply("a", uint64(i)+1, data)
	}
	ctx := context.Background()
	var n int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := s.View(ctx, "a", func(p *projection.Session) { n += len(p.AppendJSON(nil)) }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStore_Evict measures the cache's churn: every view loads a
// session that is not cached and evicts another, among many sessions
// known.
func BenchmarkStore_Evict(b *testing.B) {
	for _, known := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("%d sessions known", known), func(b *testing.B) {
			l := newFakeLoader()
			s := New()
			s.Loader = l
			s.MaxSessions = 100
			recs := benchRecords(10, 0)
			ids := make([]string, known)
			for i := range ids {
				ids[i] = fmt.Sprintf("s%d", i)
				for _, data := range recs[:2] {
					ingest(s, l, ids[i], data)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := s.View(ctx, ids[(i*7919)%known], func(*projection.Session) {}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStore_LoadQuarantined measures a load of a session whose
// records are nearly all past its bound: each is found, and quarantined,
// again.
func BenchmarkStore_LoadQuarantined(b *testing.B) {
	for _, n := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("%d quarantined", n), func(b *testing.B) {
			const bound = 400
			l := newFakeLoader()
			s := New()
			s.Loader = l
			s.MaxSessionBytes = bound
			ingest(s, l, "a", userRecord("before"))
			big := userRecord(strings.Repeat("x", bound))
			for range n {
				ingest(s, l, "a", big)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				s.Evict("a")
				if err := s.View(ctx, "a", func(*projection.Session) {}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
