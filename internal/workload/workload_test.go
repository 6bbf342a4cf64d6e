package workload_test

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// digest sums up records: their number, bytes of JSON, and a hash of
// those bytes.
func digest(t *testing.T, recs []any) string {
	t.Helper()
	enc, err := workload.Encode(recs)
	require.NoError(t, err)
	h := sha256.New()
	n := 0
	for _, b := range enc {
		h.Write(b)
		h.Write([]byte{'\n'})
		n += len(b)
	}
	return fmt.Sprintf("%d records %d bytes %x", len(recs), n, h.Sum(nil)[:8])
}

// applyPool is pkg/projection's Apply workload: cycles of turns, each
// ending in a compaction of its last messages.
func applyPool(g *workload.Generator, period, cycles int) []any {
	var pool []any
	for range cycles {
		start := len(pool)
		for len(pool)-start < period-1 {
			pool = append(pool, g.Turn()...)
		}
		pool = append(pool, g.Compaction(workload.Tail(pool[start:], 8)))
	}
	return pool
}

// The sessions the figures were measured on are the ones generated now:
// the digests were taken from the generators of pkg/perf and
// pkg/projection's benchmarks before they became this one. A change that
// moves them changes the figures, and must say so.
func TestGenerator_Unchanged(t *testing.T) {
	for _, tt := range []struct {
		name string
		recs func() []any
		want string
	}{
		{"bench fetch session of 1000 messages", func() []any {
			return workload.New(1000, workload.Default).Session(1000)
		}, "1008 records 2521300 bytes 3a3558aef240cb33"},
		{"bench smoke session of 40 messages", func() []any {
			return workload.New(40, workload.Default.WithScreenshots(4096, 10)).Session(40)
		}, "40 records 35369 bytes 57bd4c6cfdfd6962"},
		{"bench ingest cycle", func() []any {
			return workload.New(11, workload.Default).Cycle(1000)
		}, "1000 records 2534239 bytes af91b84c8225b501"},
		{"bench cold session", func() []any {
			return workload.New(5, workload.Default).Records(200)
		}, "200 records 505752 bytes 77639a0cf5d4ccc6"},
		{"bench rebuild cycle", func() []any {
			return workload.New(7, workload.Default.WithScreenshots(0, 0)).Cycle(100)
		}, "100 records 53381 bytes 87232b2e94a130af"},
		{"projection Apply pool", func() []any {
			return applyPool(workload.New(1, workload.Varied.WithScreenshots(512, 0)), 4000, 4)
		}, "16003 records 7950020 bytes db9ecfc36ebf503e"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, digest(t, tt.recs()))
		})
	}
}

// IsMessage, which the generator counts messages with, agrees with the
// context rules on every record of both profiles.
func TestIsMessage(t *testing.T) {
	for _, p := range []workload.Profile{workload.Default.WithScreenshots(64, 10), workload.Varied.WithScreenshots(64, 0)} {
		g := workload.New(3, p)
		recs := append(g.Session(2000), g.Cycle(500)...)
		messages, others := 0, 0
		for i, v := range recs {
			want := projection.Convert(v) != nil
			require.Equal(t, want, workload.IsMessage(v), "record %d", i)
			if want {
				messages++
			} else {
				others++
			}
		}
		require.Greater(t, messages, 2000)
		require.Greater(t, others, 10, "metadata rows and compactions are there too")
	}
}

// Next continues a session turn by turn: each turn holds a message, the
// screenshots keep their pace, and every call is answered within its turn.
func TestGenerator_Next(t *testing.T) {
	g := workload.New(9, workload.Default.WithScreenshots(64, 20))
	recs := g.Session(100)
	for range 200 {
		turn := g.Next()
		require.True(t, workload.IsMessage(turn[len(turn)-1]), "a turn ends in a message")
		recs = append(recs, turn...)
	}
	msgs, browser := 3, 0 // the compaction's snapshot counts
	for _, v := range recs {
		if workload.IsMessage(v) {
			msgs++
		}
		if name, _ := v.(*record.Map).String("toolName"); name == "browser_use" {
			browser++
		}
	}
	require.InDelta(t, (msgs-10)/20+1, browser, 1, "a browser turn every 20 messages, the first after 10 (%d messages)", msgs)
	res := projection.Build(projection.Numbered(recs), projection.Options{})
	require.Empty(t, res.Dropped.UnpairedCalls)
	require.Empty(t, res.Dropped.OrphanResults)
}

func TestGenerator_Deterministic(t *testing.T) {
	a, b := workload.New(4, workload.Varied), workload.New(4, workload.Varied)
	for range 100 {
		require.Equal(t, digest(t, a.Turn()), digest(t, b.Turn()))
	}
}
