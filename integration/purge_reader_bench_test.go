//go:build !slow

package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/record"
)

// BenchmarkOperator_ReaderFetch measures what a request answered through
// the stream (the test holds the ingest pin) costs: after a record of
// the session was stored (the reader reads it, and checks for removals
// after the read), beside the same session asked for again with nothing
// new (answered from memory), and a bare request-reply of the same size
// to a plain responder, in the same run. Each iteration stores one
// record first, untimed.
//
//	go test ./integration -run '^$' -bench BenchmarkOperator_ReaderFetch -benchtime 2000x
func BenchmarkOperator_ReaderFetch(b *testing.B) {
	url := natstest.Start(b)
	c := newClient(b, url)
	c.holdPin()
	startApp(b, b.TempDir(), func(cf *app.Config) {
		cf.NATSURL = url
		cf.Instance = "reader"
	})
	var last uint64
	for i := range 50 {
		last = c.publishValue("bench", record.NewMap("role", []string{"user", "assistant"}[i%2], "content", fmt.Sprintf("m%d", i)), false)
	}
	fetch := func(minSeq uint64) (*nats.Msg, time.Duration) {
		m := &nats.Msg{Subject: "ctxd.context.bench", Data: fmt.Appendf(nil, `{"min_seq":%d,"wait_ms":10000}`, minSeq)}
		start := time.Now()
		reply, err := c.nc.RequestMsg(m, 10*time.Second)
		d := time.Since(start)
		if err != nil || reply.Header.Get(micro.ErrorCodeHeader) != "" {
			b.Fatalf("fetch: %v %s", err, reply.Header.Get(micro.ErrorHeader))
		}
		return reply, d
	}
	body, _ := fetch(last)
	bare := natstest.Connect(b, url)
	sub, err := bare.Subscribe("bare.bench", func(m *nats.Msg) { m.Respond(body.Data) })
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := bare.Flush(); err != nil {
		b.Fatal(err)
	}
	var fresh, same, plain []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		last = c.publishValue("bench", record.NewMap("role", []string{"user", "assistant"}[i%2], "content", fmt.Sprintf("n%d", i)), false)
		b.StartTimer()
		_, d := fetch(last)
		fresh = append(fresh, d)
		_, d = fetch(last)
		same = append(same, d)
		start := time.Now()
		if _, err := c.nc.Request("bare.bench", nil, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		plain = append(plain, time.Since(start))
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"new", fresh}, {"same", same}, {"bare", plain}} {
		p50, p99 := percentiles(m.d)
		b.ReportMetric(us(p50), m.name+"-p50-µs")
		b.ReportMetric(us(p99), m.name+"-p99-µs")
	}
}
