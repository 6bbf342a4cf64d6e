//go:build !slow

package integration

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/app"
)

// BenchmarkFetchUnderFlood measures a fetch of a session held in memory
// (the one of BenchmarkFetch: 200 records, one 200 KiB screenshot) while
// other clients flood the service, beside the same fetch with no flood,
// measured first in the same run. It reports the p50 and p99 of each and
// the ratios (target: p50 within 2x), and beside them a bare NATS
// responder returning the same bytes, asked in turn with ctxd, idle and
// under the same flood: what the flood costs any service on the machine.
//
//   - unknown: 32 clients, each on its own connection, ask for random
//     sessions that have no records, back to back.
//   - large: 16 clients fetch a session whose reply is 7 MiB, back to
//     back.
//   - waiters: 20 000 requests wait for a min_seq that never comes (up to
//     the bound; the rest are refused), then the fetches run.
//
// An op is one fetch from ctxd and one from the bare responder, under
// the flood.
func BenchmarkFetchUnderFlood(b *testing.B) {
	for _, flood := range []string{"unknown", "large", "waiters"} {
		b.Run(flood, func(b *testing.B) { benchmarkFetchUnderFlood(b, flood) })
	}
}

var floodMaxLoads = flag.Int("flood.max-loads", 0, "BenchmarkFetchUnderFlood: ctxd's --max-loads (0: the default)")

func benchmarkFetchUnderFlood(b *testing.B, flood string) {
	a := startApp(b, b.TempDir(), func(cfg *app.Config) {
		if *floodMaxLoads > 0 {
			cfg.MaxLoads = *floodMaxLoads
		}
	})
	c := newClient(b, a.URL())
	var last uint64
	for _, r := range workload.New(1, workload.Default.WithScreenshots(200<<10, 200)).Records(200) {
		last = c.publishValue("bench", r, false)
	}
	if flood == "large" {
		// Seven records of 1 MiB of text: a 7 MiB reply.
		text := strings.Repeat("lorem ipsum ", (1<<20)/12)
		for range 7 {
			last = c.publish("large", mustJSON(b, map[string]any{"role": "user", "content": text}))
		}
		c.fetchSeq("large", last, false)
	}
	c.fetchSeq("bench", last, false)
	fetch := &nats.Msg{Subject: "ctxd.context.bench"}
	size := len(c.request(fetch.Subject, nil, nil).Data)

	// The baseline: a responder that returns the same bytes, on its own
	// connection, asked in turn with ctxd, so that both see the same
	// machine, flooded or not.
	body := c.request(fetch.Subject, nil, nil).Data
	server, err := nats.Connect(a.URL())
	require.NoError(b, err)
	defer server.Close()
	sub, err := server.Subscribe("bare.bench", func(m *nats.Msg) { m.Respond(body) })
	require.NoError(b, err)
	defer sub.Unsubscribe()
	require.NoError(b, server.Flush())
	bare := &nats.Msg{Subject: "bare.bench"}

	sample := func(n int) (ctxd, base []time.Duration) {
		for i := range n {
			for j, m := range []*nats.Msg{fetch, bare} {
				if i%2 == 1 { // alternate which goes first
					m = []*nats.Msg{bare, fetch}[j]
				}
				start := time.Now()
				reply, err := c.nc.RequestMsg(m, 30*time.Second)
				d := time.Since(start)
				if err != nil || len(reply.Data) != size {
					b.Fatalf("fetch %s: %v", m.Subject, err)
				}
				if m == fetch {
					ctxd = append(ctxd, d)
				} else {
					base = append(base, d)
				}
			}
		}
		return ctxd, base
	}
	idle, idleBare := sample(max(200, b.N))

	stop := make(chan struct{})
	var perWaiter float64 // heap and stacks per parked request
	var wg sync.WaitGroup
	var sent, refused, failed atomic.Int64
	start := make(chan struct{})
	floodClient := func(subject func() string, body []byte) {
		nc, err := nats.Connect(a.URL(), nats.Timeout(30*time.Second))
		require.NoError(b, err)
		wg.Add(1)
		go func() {
			<-start
			defer wg.Done()
			defer nc.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				msg, err := nc.Request(subject(), body, 30*time.Second)
				sent.Add(1)
				switch {
				case err != nil:
					failed.Add(1)
				case msg.Header.Get(micro.ErrorCodeHeader) == "503":
					refused.Add(1)
				case msg.Header.Get(micro.ErrorCodeHeader) != "":
					failed.Add(1)
				}
			}
		}()
	}
	switch flood {
	case "unknown":
		for range 32 {
			floodClient(func() string {
				var id [8]byte
				rand.Read(id[:])
				return "ctxd.context.unknown-" + hex.EncodeToString(id[:])
			}, nil)
		}
	case "large":
		for range 16 {
			floodClient(func() string { return "ctxd.context.large" }, nil)
		}
	case "waiters":
		nc, err := nats.Connect(a.URL())
		require.NoError(b, err)
		defer nc.Close()
		inbox := nats.NewInbox()
		var answered atomic.Int64
		sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
			answered.Add(1)
			if m.Header.Get(micro.ErrorCodeHeader) == "503" {
				refused.Add(1)
			}
		})
		require.NoError(b, err)
		defer sub.Unsubscribe()
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapInuse + ms.StackInuse
		body := []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":30000}`, last+1_000_000))
		const waiters = 20_000
		for i := range waiters {
			require.NoError(b, nc.PublishRequest("ctxd.context.w"+fmt.Sprint(i%100), inbox+"."+fmt.Sprint(i), body))
		}
		require.NoError(b, nc.Flush())
		sent.Store(waiters)
		// The endpoint handles one connection's requests in order: once a
		// fetch sent after them is answered, each is parked or refused.
		_, err = nc.Request(fetch.Subject, nil, 60*time.Second)
		require.NoError(b, err)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if n := waiters - refused.Load(); n > 0 {
			perWaiter = float64(int64(ms.HeapInuse+ms.StackInuse)-int64(before)) / float64(n)
		}
	}

	close(start)
	b.ResetTimer()
	loaded, loadedBare := sample(b.N)
	b.StopTimer()
	close(stop)
	wg.Wait()

	ip50, ip99 := percentiles(idle)
	fp50, fp99 := percentiles(loaded)
	if perWaiter > 0 {
		b.ReportMetric(perWaiter, "bytes/waiter")
	}
	b.ReportMetric(us(ip50), "idle-p50-µs")
	b.ReportMetric(us(ip99), "idle-p99-µs")
	b.ReportMetric(us(fp50), "flood-p50-µs")
	b.ReportMetric(us(fp99), "flood-p99-µs")
	b.ReportMetric(float64(fp50)/float64(ip50), "p50-ratio")
	b.ReportMetric(float64(fp99)/float64(ip99), "p99-ratio")
	bp50, _ := percentiles(idleBare)
	bfp50, bfp99 := percentiles(loadedBare)
	b.ReportMetric(us(bp50), "bare-idle-p50-µs")
	b.ReportMetric(us(bfp50), "bare-flood-p50-µs")
	b.ReportMetric(us(bfp99), "bare-flood-p99-µs")
	b.ReportMetric(float64(fp50)/float64(bfp50), "flood-p50-vs-bare")
	b.ReportMetric(float64(sent.Load()), "flood-requests")
	b.ReportMetric(float64(refused.Load()), "flood-503")
	b.ReportMetric(float64(failed.Load()), "flood-failed")
}
