//go:build unix

package store

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/ctxd/ctxd/internal/workload"
)

// BenchmarkStore_ApplyText applies text records (workload.Default
// without screenshots, 483 bytes on average) to 500 sessions of 600
// records each, that never compact, each record its own buffer as NATS
// delivers it: the shape of BenchmarkIngest (pkg/perf) without the
// delivery, into a fresh store each op. Besides the time, it reports the
// process's CPU a record (user and system: a heap that grows is faulted
// in page by page), the minor page faults and the bytes allocated a
// record, and the heap live after a collection a record (the records'
// buffers the store still holds included).
//
//	go test ./pkg/store -run '^$' -bench ApplyText -benchtime 3x
func BenchmarkStore_ApplyText(b *testing.B) {
	const sessions, perSession = 500, 600
	pool, err := workload.Encode(workload.New(11, workload.Default.WithScreenshots(0, 100)).Cycle(1000))
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("s%d", i)
	}
	const n = sessions * perSession
	var cpu time.Duration
	var faults, allocated, live uint64
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		// The records' buffers, made before the clock starts.
		data := make([][]byte, n)
		for i := range data {
			data[i] = append([]byte(nil), pool[(i/sessions)%len(pool)]...)
		}
		runtime.GC()
		var ru0, ru1 syscall.Rusage
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru0); err != nil {
			b.Fatal(err)
		}
		s := New()
		s.Decoder.ShareInput, s.Decoder.ShareShort = true, true // as the app's store
		b.StartTimer()
		for i := range n {
			s.Apply(ids[i%sessions], uint64(i)+1, data[i])
			data[i] = nil // the store's alone, as a delivered message's
		}
		b.StopTimer()
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru1); err != nil {
			b.Fatal(err)
		}
		runtime.ReadMemStats(&ms1)
		cpu += time.Duration(syscall.TimevalToNsec(ru1.Utime) - syscall.TimevalToNsec(ru0.Utime) +
			syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Stime))
		faults += uint64(ru1.Minflt - ru0.Minflt)
		allocated += ms1.TotalAlloc - ms0.TotalAlloc
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		live += ms1.HeapAlloc - base.HeapAlloc - uint64(cap(data))*24 // less data's own slice
		if st := s.Stats(); st.Records != n {
			b.Fatalf("%d records applied, want %d", st.Records, n)
		}
		runtime.KeepAlive(s)
		b.StartTimer()
	}
	records := float64(b.N * n)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/records, "ns/record")
	b.ReportMetric(float64(cpu.Nanoseconds())/records, "cpu-ns/record")
	b.ReportMetric(float64(faults)/records, "faults/record")
	b.ReportMetric(float64(allocated)/records, "B-alloc/record")
	b.ReportMetric(float64(live)/records, "B-live/record")
}
