//go:build !slow

package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
)

var (
	memCacheBytes = flag.Int64("mem.cache-bytes", 128<<20, "BenchmarkMemoryBound: ctxd's --cache-bytes")
	memRecords    = flag.Int("mem.records", 20, "BenchmarkMemoryBound: records of -mem.record-bytes, one session each")
	memRecordSize = flag.Int("mem.record-bytes", 6<<20, "BenchmarkMemoryBound: bytes of each record")
	memPerSession = flag.Int("mem.per-session", 1, "BenchmarkMemoryBound: records per session")
	memEmbedded   = flag.Bool("mem.embedded", false, "BenchmarkMemoryBound: ctxd runs the embedded NATS server, whose memory then counts in its RSS")
)

// BenchmarkMemoryBound runs ctxd as a process against a NATS server of
// its own (so that its resident memory is ctxd's alone) with
// --cache-bytes, publishes -mem.records sessions of one record of
// -mem.record-bytes (20 of 6 MiB by default; -mem.per-session records
// each), and fetches them all, in
// turn and four at a time, b.N rounds, so that sessions are loaded,
// rendered and evicted over and over. It samples the process's RSS every
// 20 ms and reports the peak (VmHWM), the RSS at the end, the base (RSS
// before the first record), the cache's own estimate at its largest, the
// bound, (peak - base) / bound, and (peak - 64 MiB) / bound: docs/OPERATING.md
// says the process stays within 1.3 x --cache-bytes + 64 MiB, so the
// last stays within 1.3.
func BenchmarkMemoryBound(b *testing.B) {
	args := []string{"--cache-bytes", fmt.Sprint(*memCacheBytes), "--render-cache-bytes", "0"}
	url := ""
	if *memEmbedded {
		args = append(args, "--port", "-1", "--data", b.TempDir())
	} else {
		url = natstest.Start(b)
		args = append(args, "--nats", url)
	}
	p := startProcess(b, args...)
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("ctxd's log: %s", tail(p.stderr.String(), 3000))
		}
	})
	if url == "" {
		url = p.url
	}
	pid := p.cmd.Process.Pid
	nc, err := nats.Connect(url)
	require.NoError(b, err)
	defer nc.Close()
	c := newClient(b, url)

	time.Sleep(time.Second) // let the process settle: the base is its idle RSS
	base := procStatus(b, pid, "VmRSS")

	var mu sync.Mutex
	var peakEstimate, samples int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if est, ok := cacheEstimate(nc); ok {
				mu.Lock()
				peakEstimate = max(peakEstimate, est)
				samples++
				mu.Unlock()
			}
		}
	}()

	text := strings.Repeat("0123456789abcdef", *memRecordSize/16)
	var last uint64
	for i := range *memRecords {
		for j := range *memPerSession {
			// Each record differs, so no two share memory anywhere.
			role := []string{"user", "assistant"}[j%2]
			last = c.publish(fmt.Sprintf("big%d", i), mustJSON(b, map[string]any{"role": role, "content": fmt.Sprint(i, " ", j) + text}))
		}
	}
	waitIngest(b, c, fmt.Sprintf("big%d", *memRecords-1), last)

	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		next := make(chan int)
		for range 4 {
			wg.Go(func() {
				for i := range next {
					r, err := ctxdclient.Context(context.Background(), c.nc, fmt.Sprintf("big%d", i), ctxdclient.Request{})
					require.NoError(b, err)
					require.Greater(b, len(r), *memRecordSize**memPerSession)
				}
			})
		}
		for i := range *memRecords {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	b.StopTimer()
	close(stop)
	<-sampled
	end := procStatus(b, pid, "VmRSS")
	peak := procStatus(b, pid, "VmHWM")
	bound := *memCacheBytes
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	b.ReportMetric(mib(base), "base-rss-MiB")
	b.ReportMetric(mib(peak), "peak-rss-MiB")
	b.ReportMetric(mib(end), "end-rss-MiB")
	b.ReportMetric(mib(peakEstimate), "peak-estimate-MiB")
	b.ReportMetric(mib(bound), "bound-MiB")
	b.ReportMetric(float64(peak-base)/float64(bound), "peak-over-base/bound")
	b.ReportMetric(float64(peak-memoryBase)/float64(bound), "peak-over-64MiB/bound")
	b.Logf("cache-bytes %d MiB, %d records of %d MiB: base %.0f MiB, peak RSS %.0f MiB, end %.0f MiB, cache estimate up to %.0f MiB (%d samples)",
		bound>>20, *memRecords, *memRecordSize>>20, mib(base), mib(peak), mib(end), mib(peakEstimate), samples)
}

// memoryBase is the fixed part of the memory bound docs/OPERATING.md states.
const memoryBase = 64 << 20

// cacheEstimate returns the store's estimate of the projections it holds,
// from $SRV.STATS.
func cacheEstimate(nc *nats.Conn) (int64, bool) {
	msg, err := nc.Request("$SRV.STATS.ctxd", nil, 2*time.Second)
	if err != nil {
		return 0, false
	}
	var st struct {
		Endpoints []struct {
			Name string `json:"name"`
			Data struct {
				Bytes int64 `json:"bytes"`
			} `json:"data"`
		} `json:"endpoints"`
	}
	if json.Unmarshal(msg.Data, &st) != nil {
		return 0, false
	}
	for _, e := range st.Endpoints {
		if e.Name == "context" {
			return e.Data.Bytes, true
		}
	}
	return 0, false
}
