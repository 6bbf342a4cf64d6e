package perf

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// cold measures the cold and memory figures, which share a stream of
// many sessions.
func (b *bench) cold(ctx context.Context) ([]Row, error) {
	cfg := b.cfg
	a, err := b.startApp(ctx)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	p, err := b.newPublisher()
	if err != nil {
		return nil, err
	}
	per := cfg.ColdSessionRecords
	S := cfg.ColdRecords / per
	recs, err := workload.Encode(workload.New(5, cfg.profile()).Records(per))
	if err != nil {
		return nil, err
	}
	b.logf("cold: filling a stream of %d records: %d sessions of %d", S*per, S, per)
	start := time.Now()
	name := func(i int) string { return fmt.Sprintf("c%d", i) }
	last, err := p.publishPaced(ctx, a, 0, S*per, func(i int) (string, []byte) {
		return subject.TranscriptsPrefix + name(i%S), recs[i/S]
	})
	if err != nil {
		return nil, err
	}
	b.logf("cold: filled and applied in %v", time.Since(start).Round(time.Millisecond))
	b.checkApplied("cold", a, uint64(S*per))

	var rows []Row
	if cfg.wants(FigureCold) {
		row, err := b.coldLoads(ctx, a, S, name, last-uint64(S*per)+1)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row...)
	}
	if cfg.wants(FigureMemory) {
		row, err := b.memory(ctx, a, name)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// coldLoads fetches sessions just evicted, against a client reading the
// same records with direct gets, interleaved. The fill stored its first
// record at first.
func (b *bench) coldLoads(ctx context.Context, a *app.App, S int, name func(int) string, first uint64) ([]Row, error) {
	def, err := streams.Transcripts()
	if err != nil {
		return nil, err
	}
	per := b.cfg.ColdSessionRecords
	i, j := 0, 0
	load := func() error {
		s := name((i * 7919) % S)
		i++
		a.Store().Evict(s) // as the cache does to the least recently used
		_, err := fetchOnce(ctx, b.nc, s, client.Request{})
		return err
	}
	// The baseline reads what the load reads: the session's records, by
	// their sequences (the fill published record k of session s at
	// k*S+s+1), with pipelined direct gets.
	seqs := make([]uint64, per)
	read := func() error {
		k := (j * 7919) % S
		j++
		for r := range seqs {
			seqs[r] = first + uint64(r*S+k)
		}
		n := 0
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		err := bus.ReadSubjectSeqs(rctx, b.nc, def.Name, subject.TranscriptsPrefix+name(k), seqs, func(uint64, []byte) error { n++; return nil })
		if err == nil && n != per {
			err = fmt.Errorf("cold: read %d records of %s, expected %d", n, name(k), per)
		}
		return err
	}
	lc, lr, err := interleave(ctx, b.cfg.ColdSamples, load, read)
	if err != nil {
		return nil, err
	}
	st := a.Store().Stats()
	b.logf("cold: %d records a session: load p50 %v p99 %v, read p50 %v p99 %v (%d loads)", per,
		percentile(lc, .5), percentile(lc, .99), percentile(lr, .5), percentile(lr, .99), st.Loads)
	row := func(q string, v float64, t Target) Row {
		return Row{Figure: fmt.Sprintf("cold load, %d records %s", per, q), Kind: Latency,
			Ctxd: percentile(lc, v).Seconds(), Baseline: percentile(lr, v).Seconds(), Target: t}
	}
	return []Row{
		row("p50", .5, Target{MaxValue: 0.005}),
		row("p99", .99, Target{}),
	}, nil
}

// memory loads sessions and measures the heap they take, against the
// bytes of their context replies.
func (b *bench) memory(ctx context.Context, a *app.App, name func(int) string) (Row, error) {
	M := b.cfg.MemorySessions
	for _, s := range a.Store().Sessions() {
		a.Store().Evict(s)
	}
	replies := 0
	for i := range M {
		data, err := fetchOnce(ctx, b.nc, name(i), client.Request{})
		if err != nil {
			return Row{}, err
		}
		replies += len(data)
	}
	if d := b.cfg.MemorySettle; d > 0 {
		b.logf("memory: %d sessions loaded; waiting %v for the server's caches to expire", M, d)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return Row{}, ctx.Err()
		}
	}
	loaded := readHeap()
	st := a.Store().Stats()
	if st.Loaded != int64(M) {
		return Row{}, fmt.Errorf("memory: %d sessions loaded, expected %d (is the cache too small?)", st.Loaded, M)
	}
	if path := b.cfg.HeapProfile; path != "" {
		if err := writeHeapProfile(path); err != nil {
			return Row{}, err
		}
	}
	for i := range M {
		a.Store().Evict(name(i))
	}
	evicted := readHeap()
	row := memoryRow(M, loaded, evicted, replies)
	row.Figure = fmt.Sprintf("memory per live session, %d records", b.cfg.ColdSessionRecords)
	b.logf("memory: %d sessions, a session: %.0f bytes of heap in use freed on eviction (signed: %.0f), of live objects %.0f; store estimate %.0f; reply %.0f bytes",
		M, row.Ctxd, signedPer(loaded.inuse, evicted.inuse, M), signedPer(loaded.alloc, evicted.alloc, M), float64(st.Bytes)/float64(M), row.Baseline)
	if row.Unmeasured != "" {
		b.warnf("memory: %s", row.Unmeasured)
	}
	return row, nil
}

// signedPer is (a - b) / n, negative when b is larger.
func signedPer(a, b uint64, n int) float64 { return (float64(a) - float64(b)) / float64(n) }

// memoryRow is the memory figure of n sessions from the heap with them
// loaded and after their eviction: the heap in use freed, per session. The
// readings are of the whole process; when it did not shrink (what other
// goroutines allocated meanwhile outweighs the sessions), the figure is
// unmeasured, never a negative or zero size that would meet its target.
func memoryRow(n int, loaded, evicted heap, replies int) Row {
	row := Row{Kind: Bytes, Baseline: float64(replies) / float64(n), Target: Target{MaxRatio: 1.5}}
	if loaded.inuse <= evicted.inuse {
		row.Unmeasured = fmt.Sprintf("the heap in use did not shrink when %d sessions were evicted (%d bytes before, %d after): other allocations of the process outweigh them; measure more sessions (--memory-sessions)", n, loaded.inuse, evicted.inuse)
		return row
	}
	row.Ctxd = float64(loaded.inuse-evicted.inuse) / float64(n)
	return row
}

// heap is the heap after garbage collection: the bytes of its spans in
// use, and of the live objects in them.
type heap struct{ inuse, alloc uint64 }

func readHeap() heap {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return heap{ms.HeapInuse, ms.HeapAlloc}
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
