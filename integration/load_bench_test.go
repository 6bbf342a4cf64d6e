//go:build !slow

package integration

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/app"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/record"
)

// fillStream publishes sessions x perSession realistic records (~480
// bytes each, no screenshots), interleaving sessions, and returns the
// last sequence.
func fillStream(b testing.TB, js jetstream.JetStream, sessions, perSession int) uint64 {
	b.Helper()
	payloads, err := workload.Encode(workload.New(7, workload.Default.WithScreenshots(0, 0)).Records(perSession))
	require.NoError(b, err)
	return publishWindowed(b, js, sessions*perSession, 2000, func(n int) (string, []byte) {
		return fmt.Sprintf("transcripts.s%d", n%sessions), payloads[n/sessions]
	})
}

func startAppWith(b testing.TB, dir string, tune func(*app.Config)) *app.App {
	b.Helper()
	cfg := app.DefaultConfig()
	cfg.DataDir, cfg.Port = dir, -1
	tune(&cfg)
	a := app.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	require.NoError(b, a.Open(ctx))
	b.Cleanup(func() { a.Close() })
	return a
}

// BenchmarkColdLoad fetches 200-record sessions that are not in memory,
// from a stream of 200 000 records over 1 000 sessions (smaller with
// -short), against warm fetches of the same sessions in the same run. It
// also reports memory at the cache bound.
func BenchmarkColdLoad(b *testing.B) {
	sessions, per := 1000, 200
	if testing.Short() {
		sessions = 50
	}
	a := startAppWith(b, b.TempDir(), func(c *app.Config) { c.CacheSessions = 100 })
	c := newClient(b, a.URL())
	last := fillStream(b, c.js, sessions, per)
	ctx := context.Background()
	_, err := ctxdclient.Context(ctx, c.nc, "s0", ctxdclient.Request{MinSeq: last, WaitMS: 30000})
	require.NoError(b, err)

	var cold, warm []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := fmt.Sprintf("s%d", (i*7919)%sessions)
		// Cold: drop it from memory first, as an eviction would.
		a.Store().Evict(s)
		t0 := time.Now()
		data, err := ctxdclient.Context(ctx, c.nc, s, ctxdclient.Request{})
		d := time.Since(t0)
		require.NoError(b, err)
		require.Greater(b, len(data), 1000)
		cold = append(cold, d)
		t0 = time.Now()
		_, err = ctxdclient.Context(ctx, c.nc, s, ctxdclient.Request{})
		warm = append(warm, time.Since(t0))
		require.NoError(b, err)
	}
	b.StopTimer()
	cp50, cp99 := percentiles(cold)
	wp50, wp99 := percentiles(warm)
	b.ReportMetric(us(cp50), "cold-p50-µs")
	b.ReportMetric(us(cp99), "cold-p99-µs")
	b.ReportMetric(us(wp50), "warm-p50-µs")
	b.ReportMetric(us(wp99), "warm-p99-µs")

	// Memory with every session fetched once through a 100-session cache.
	for s := 0; s < sessions; s++ {
		_, err := ctxdclient.Context(ctx, c.nc, fmt.Sprintf("s%d", s), ctxdclient.Request{})
		require.NoError(b, err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := a.Store().Stats()
	b.ReportMetric(float64(st.Loaded), "loaded-sessions")
	b.ReportMetric(float64(st.Bytes)/(1<<20), "cache-estimate-MiB")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
}

// BenchmarkRestart measures how long ctxd takes to open on a store with
// 10 000 checkpointed sessions (1 000 with -short).
func BenchmarkRestart(b *testing.B) {
	sessions := 10000
	if testing.Short() {
		sessions = 1000
	}
	dir := b.TempDir()
	a := startAppWith(b, dir, func(*app.Config) {})
	c := newClient(b, a.URL())
	g := workload.New(3, workload.Default.WithScreenshots(0, 0))
	recs := g.Records(4)
	recs = append(recs, g.Compaction([]any{g.User()}))
	for s := 0; s < sessions; s++ {
		for _, r := range recs {
			data, _ := record.MarshalJSON(r)
			if c.js.PublishAsyncPending() >= 2000 {
				<-c.js.PublishAsyncComplete()
			}
			_, err := c.js.PublishAsync(fmt.Sprintf("transcripts.r%d", s), data)
			require.NoError(b, err)
		}
	}
	<-c.js.PublishAsyncComplete()
	info, err := c.js.Stream(context.Background(), "TRANSCRIPTS")
	require.NoError(b, err)
	last := info.CachedInfo().State.LastSeq
	_, err = ctxdclient.Context(context.Background(), c.nc, "r0", ctxdclient.Request{MinSeq: last, WaitMS: 30000})
	require.NoError(b, err)
	require.NoError(b, a.Close())

	var opens []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		a := startAppWith(b, dir, func(*app.Config) {})
		opens = append(opens, time.Since(t0))
		b.StopTimer()
		require.NoError(b, a.Close())
		b.StartTimer()
	}
	p50, _ := percentiles(opens)
	b.ReportMetric(float64(p50)/float64(time.Millisecond), "open-ms")
	b.ReportMetric(float64(sessions), "sessions")
}

// BenchmarkManySessions writes 100 000 sessions (5 000 with -short),
// fetches each once through a 1 000-session cache, and reports the heap
// and the cache's own accounting: memory stays bounded by the cache, not
// by the number of sessions.
func BenchmarkManySessions(b *testing.B) {
	sessions := 100000
	if testing.Short() {
		sessions = 5000
	}
	a := startAppWith(b, b.TempDir(), func(c *app.Config) { c.CacheSessions = 1000 })
	c := newClient(b, a.URL())
	last := fillStream(b, c.js, sessions, 2)
	ctx := context.Background()
	_, err := ctxdclient.Context(ctx, c.nc, "s0", ctxdclient.Request{MinSeq: last, WaitMS: 30000})
	require.NoError(b, err)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for s := 0; s < sessions; s++ {
			_, err := ctxdclient.Context(ctx, c.nc, fmt.Sprintf("s%d", s), ctxdclient.Request{})
			require.NoError(b, err)
		}
	}
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := a.Store().Stats()
	require.LessOrEqual(b, st.Loaded, int64(1000))
	b.ReportMetric(float64(st.Sessions), "sessions")
	b.ReportMetric(float64(st.Loaded), "loaded")
	b.ReportMetric(float64(st.Evictions), "evictions")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
}
