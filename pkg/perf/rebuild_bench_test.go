package perf

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"syscall"
	"testing"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/rebuild"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
)

// The rebuild handlers alone, without the stream: what each costs a
// record on top of reading it, in wall and CPU time. One op rebuilds
// 100 000 records over 500 sessions, interleaved as in the bench's
// stream. sequential is the former rebuild, one record after the other;
// gc400 runs it with the collector's target raised to 400%.
func BenchmarkRebuildHandler(b *testing.B) {
	const n, sessions = 100_000, 500
	recs, err := workload.Encode(workload.New(7, rebuildProfile).Cycle(rebuildPeriod))
	if err != nil {
		b.Fatal(err)
	}
	subjects := make([]string, sessions)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("%sr%d", subject.TranscriptsPrefix, i)
	}
	feed := func(add func(id string, seq uint64, data []byte)) {
		for i := range n {
			if id, err := subject.SessionOf(subjects[i%sessions], subject.TranscriptsPrefix); err == nil {
				add(id, uint64(i+1), recs[(i/sessions)%len(recs)])
			}
		}
	}
	run := func(name string, gc int, f func()) {
		b.Run(name, func(b *testing.B) {
			if gc != 0 {
				defer debug.SetGCPercent(debug.SetGCPercent(gc))
			}
			var ru0, ru1 syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			for b.Loop() {
				f()
			}
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
			b.ReportMetric(float64(cpu)/float64(b.N)/n, "cpu-ns/record")
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapSys)/1e6, "heap-sys-MB")
		})
	}
	run("checkpoints", 0, func() {
		cps := rebuild.NewCheckpoints()
		feed(cps.Add)
	})
	sequential := func() {
		ss := map[string]*rebuild.Session{}
		feed(func(id string, seq uint64, data []byte) {
			s := ss[id]
			if s == nil {
				s = rebuild.NewSession(projection.Options{}, store.DefaultLimits())
				ss[id] = s
			}
			s.Add(seq, data)
		})
	}
	run("sequential", 0, sequential)
	run("sequential/gc400", 400, sequential)
	for _, w := range []int{1, 2} {
		run(fmt.Sprintf("workers%d", w), 0, func() {
			p := rebuild.NewProjections(projection.Options{}, store.DefaultLimits(), w)
			feed(p.Add)
			p.Close()
		})
	}
}
