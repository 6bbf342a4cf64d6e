//go:build !slow

package integration

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/record"
)

// BenchmarkInspector_Views measures what views of a large session cost
// the service: 8 browsers opening the inspector's page of a session of 40
// records of 7 MB (screenshots) at once, each loading it again every
// 500 ms, against fetches of another, small session from the moment they
// open it, whose latency is compared with the same fetches while nothing
// else runs. It reports the fetches' p50 and p99 both ways, their ratio,
// the slowest first page, and how the views were answered (200, or 503
// past the views the inspector reads at once). Run it alone:
// go test ./integration -run '^$' -bench BenchmarkInspector_Views -benchtime 1x.
func BenchmarkInspector_Views(b *testing.B) {
	const records, size, views, fetches = 40, 7 << 20, 8, 300
	a := startAppWith(b, b.TempDir(), func(c *app.Config) { c.HTTPAddr = "127.0.0.1:0" })
	c := newClient(b, a.URL())
	raw := make([]byte, size*3/4)
	for i := range records {
		rand.Read(raw)
		v := record.NewMap("role", "toolResult", "toolCallId", fmt.Sprint("b", i), "content",
			[]any{record.NewMap("type", "image", "data", base64.StdEncoding.EncodeToString(raw), "mimeType", "image/png")})
		c.publishValue("big", v, true)
	}
	var last uint64
	for i := range 5 {
		last = c.publishValue("small", record.NewMap("role", "user", "content", fmt.Sprint("message ", i)), false)
	}
	c.fetchSeq("small", last, false) // in memory from now on

	latencies := func() []time.Duration {
		out := make([]time.Duration, 0, fetches)
		for range fetches {
			start := time.Now()
			_, serr := c.fetch("small", nil, nil)
			require.Nil(b, serr)
			out = append(out, time.Since(start))
		}
		slices.Sort(out)
		return out
	}
	pct := func(d []time.Duration, p float64) float64 {
		return float64(d[int(float64(len(d)-1)*p)].Microseconds()) / 1000
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		idle := latencies()

		url := "http://" + a.HTTPListenAddr() + "/ui/sessions/big"
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var ok, busy, failed atomic.Int64
		var peak, firstPage atomic.Uint64
		start := time.Now()
		for range views {
			wg.Go(func() {
				hc := &http.Client{Timeout: 2 * time.Minute}
				for first := true; ; first = false {
					if !first {
						select {
						case <-stop:
							return
						case <-time.After(500 * time.Millisecond):
						}
					}
					resp, err := hc.Get(url)
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						if ok.Add(1) <= views {
							firstPage.Store(max(firstPage.Load(), uint64(time.Since(start))))
						}
					case http.StatusServiceUnavailable:
						busy.Add(1)
						time.Sleep(200 * time.Millisecond) // as the page's Retry-After asks, roughly
					default:
						failed.Add(1)
					}
				}
			})
		}
		wg.Go(func() {
			for {
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
		loaded := latencies()
		for ok.Load() < views { // the fetches covered the views' first pages
			loaded = append(loaded, latencies()...)
		}
		slices.Sort(loaded)
		close(stop)
		wg.Wait()

		b.ReportMetric(pct(idle, .5), "idle-p50-ms")
		b.ReportMetric(pct(idle, .99), "idle-p99-ms")
		b.ReportMetric(pct(loaded, .5), "views-p50-ms")
		b.ReportMetric(pct(loaded, .99), "views-p99-ms")
		b.ReportMetric(pct(loaded, .99)/pct(idle, .99), "p99-ratio")
		b.ReportMetric(float64(firstPage.Load())/1e6, "first-pages-ms")
		b.ReportMetric(float64(ok.Load()), "views-200")
		b.ReportMetric(float64(busy.Load()), "views-503")
		b.ReportMetric(float64(failed.Load()), "views-failed")
		b.ReportMetric(float64(peak.Load()-min(peak.Load(), before.HeapInuse))/(1<<20), "heap-growth-MiB")
	}
}
