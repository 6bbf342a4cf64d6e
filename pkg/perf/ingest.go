package perf

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// ingestPeriod is the number of records between two compactions of an
// ingest session, which keeps every session bounded however long the run.
const ingestPeriod = 1000

// ingest compares records/s from publish to applied with a raw async
// publish of the same records to an identical stream; with the same
// records seen, while they are published, by an ordered consumer that
// does nothing (the cheapest way JetStream delivers every record once);
// and with them consumed by a durable consumer like ctxd's whose handler
// does nothing; in alternating rounds. The ordered consumer runs twice a
// round, and the ratio of its two runs (A/A: nothing differs but the
// moment) shows how far a round's ratio moves on this machine at these
// sizes: what the figure can resolve.
func (b *bench) ingest(ctx context.Context) ([]Row, error) {
	cfg := b.cfg
	a, err := b.startApp(ctx)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	def, err := streams.Transcripts()
	if err != nil {
		return nil, err
	}
	raw := def
	raw.Name, raw.Subjects = rawStream, []string{rawSubject + ">"}
	raw.Description = "ctxd bench: the raw-publish baseline of the ingest figure"
	if _, err := b.js.CreateStream(ctx, raw); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", raw.Name, err)
	}
	bare := def
	bare.Name, bare.Subjects = bareStream, []string{bareSubject + ">"}
	bare.Description = "ctxd bench: the bare-consumer baseline of the ingest figure"
	if _, err := b.js.CreateStream(ctx, bare); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", bare.Name, err)
	}
	ordered := def
	ordered.Name, ordered.Subjects = orderedStream, []string{orderedSubject + ">"}
	ordered.Description = "ctxd bench: the ordered-consumer baseline of the ingest figure"
	if _, err := b.js.CreateStream(ctx, ordered); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", ordered.Name, err)
	}
	again := def
	again.Name, again.Subjects = againStream, []string{againSubject + ">"}
	again.Description = "ctxd bench: the ordered consumer's second run of each round, the ingest figure's A/A"
	if _, err := b.js.CreateStream(ctx, again); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", again.Name, err)
	}
	// The consumers of the baselines read on their own connection, as
	// ctxd does: the publisher's acknowledgements come on the run's.
	cnc, err := nats.Connect(b.url, nats.Name("ctxd-bench-consumer"))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", b.url, err)
	}
	defer cnc.Close()
	cjs, err := jetstream.New(cnc)
	if err != nil {
		return nil, err
	}
	bst, err := cjs.Stream(ctx, bare.Name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", bare.Name, err)
	}
	ost, err := cjs.Stream(ctx, ordered.Name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", ordered.Name, err)
	}
	ast, err := cjs.Stream(ctx, again.Name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", again.Name, err)
	}
	ccfg, err := streams.Ingest()
	if err != nil {
		return nil, err
	}
	ccfg.Durable, ccfg.Name, ccfg.FilterSubject = "perf", "perf", bareSubject+">"
	cons, err := bus.EnsureConsumer(ctx, bst, ccfg)
	if err != nil {
		return nil, err
	}
	var consumed, target atomic.Uint64
	reached := make(chan struct{}, 1)
	in, err := bus.StartIngest(cons, 0, nil, func(bus.Msg) {
		if consumed.Add(1) == target.Load() {
			reached <- struct{}{}
		}
	}, nil)
	if err != nil {
		return nil, err
	}
	defer in.Close()

	p, err := b.newPublisher()
	if err != nil {
		return nil, err
	}
	pool, err := workload.Encode(workload.New(11, cfg.profile()).Cycle(ingestPeriod))
	if err != nil {
		return nil, err
	}
	size := 0
	for _, r := range pool {
		size += len(r)
	}
	S, N := cfg.IngestSessions, cfg.IngestRecords
	b.logf("ingest: %d records per round over %d live sessions (%d bytes a record on average), %d rounds",
		N, S, size/len(pool), cfg.IngestRounds)

	// Live sessions: each gets a first record, and a fetch loads it.
	sessions := make([]string, S)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("ingest-%d", i)
	}
	last, err := p.publish(ctx, S, func(i int) (string, []byte) { return subject.TranscriptsPrefix + sessions[i], pool[0] })
	if err != nil {
		return nil, err
	}
	// Once the instance's ingest holds them, the fetches load them into
	// its store (a fetch before may be answered by reading the stream).
	if err := a.Wait(ctx, last, 30*time.Second); err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	for _, s := range sessions {
		if _, err := fetchOnce(ctx, b.nc, s, client.Request{MinSeq: last, WaitMS: 30000}); err != nil {
			return nil, err
		}
	}
	if st := a.Store().Stats(); st.Loaded < int64(S) {
		return nil, fmt.Errorf("ingest: %d of %d sessions loaded", st.Loaded, S)
	}

	perRound := (N + S - 1) / S
	var round int
	records := func(prefix string) func(i int) (string, []byte) {
		return func(i int) (string, []byte) {
			return prefix + sessions[i%S], pool[(1+round*perRound+i/S)%len(pool)]
		}
	}
	var rawRates, bareRates, ctxdRates, orderedRates, againRates []float64
	sides := []func() error{
		func() error { // raw publish, nobody consuming
			start := time.Now()
			if _, err := p.publish(ctx, N, records(rawSubject)); err != nil {
				return err
			}
			rawRates = append(rawRates, float64(N)/time.Since(start).Seconds())
			return nil
		},
		func() error { // a consumer that does nothing
			target.Store(consumed.Load() + uint64(N))
			start := time.Now()
			if _, err := p.publish(ctx, N, records(bareSubject)); err != nil {
				return err
			}
			select {
			case <-reached:
			case <-time.After(10 * time.Minute):
				return fmt.Errorf("ingest: the bare consumer took %d of %d records in 10 minutes", consumed.Load(), target.Load())
			}
			bareRates = append(bareRates, float64(N)/time.Since(start).Seconds())
			return nil
		},
		func() error { // ctxd
			rate, err := b.ingestRound(ctx, a, N, last, records(subject.TranscriptsPrefix))
			if err != nil {
				return err
			}
			last += uint64(N)
			ctxdRates = append(ctxdRates, rate)
			return nil
		},
		func() error { // an ordered consumer that does nothing
			rate, err := b.orderedRound(ctx, "ordered consumer", ost, bus.PullBytes(cnc), N, records(orderedSubject))
			if err != nil {
				return err
			}
			orderedRates = append(orderedRates, rate)
			return nil
		},
		func() error { // the ordered consumer again, on its own stream: the A/A
			rate, err := b.orderedRound(ctx, "ordered consumer again", ast, bus.PullBytes(cnc), N, records(againSubject))
			if err != nil {
				return err
			}
			againRates = append(againRates, rate)
			return nil
		},
	}
	names := []string{"raw", "bare", "ctxd", "ordered", "ordered-again"} // of the profiles, in the order of sides
	// The process's CPU time per record, per side: the whole process,
	// server included, so what each side costs the machine.
	cpu := make([][]float64, len(sides))
	for round = range cfg.IngestRounds {
		for k := range sides {
			// Every other round runs the sides in reverse order, so that
			// no side always follows the same one; and each starts with
			// the garbage of the one before collected, so that none pays
			// for another's.
			i := k
			if round%2 == 1 {
				i = len(sides) - 1 - k
			}
			runtime.GC()
			stop, err := b.profileSide(names[i], round)
			if err != nil {
				return nil, err
			}
			before := processCPU()
			err = sides[i]()
			cpu[i] = append(cpu[i], float64(processCPU()-before)/float64(time.Microsecond)/float64(N))
			stop()
			if err != nil {
				return nil, err
			}
		}
		b.logf("ingest: round %d: ctxd %.0f records/s, raw publish %.0f records/s, ordered consumer %.0f records/s (ctxd %.2fx), bare durable consumer %.0f records/s, ordered consumer again %.0f records/s (A/A %.2fx)",
			round+1, ctxdRates[round], rawRates[round], orderedRates[round], ctxdRates[round]/orderedRates[round], bareRates[round], againRates[round], againRates[round]/orderedRates[round])
	}
	// The durable consumer saw the bare side's records and no others:
	// a record of another side reaching it too would be delivered twice,
	// and that side measured slower than it is.
	if got, want := consumed.Load(), uint64(cfg.IngestRounds*N); got != want {
		return nil, fmt.Errorf("ingest: the bare durable consumer saw %d records, want %d: another side published to its subjects", got, want)
	}
	b.logf("ingest: CPU time of the process per record (medians): ctxd %.1f µs, raw publish %.1f µs, ordered consumer %.1f µs, bare durable consumer %.1f µs, ordered consumer again %.1f µs",
		median(cpu[2]), median(cpu[0]), median(cpu[3]), median(cpu[1]), median(cpu[4]))
	b.checkApplied("ingest", a, uint64(S+cfg.IngestRounds*N))
	st := a.Store().Stats()
	b.logf("ingest: store: %d sessions loaded, %d records applied, %d evictions, %d rejected", st.Loaded, st.Records, st.Evictions, st.Rejected)
	vsOrdered, vsRaw, vsBare := ratios(ctxdRates, orderedRates), ratios(ctxdRates, rawRates), ratios(ctxdRates, bareRates)
	aa := ratios(againRates, orderedRates)
	b.logf("ingest: ctxd's ratio to the ordered consumer, round by round: %s (median %.2fx)", formatRatios(vsOrdered), median(vsOrdered))
	b.logf("ingest: the ordered consumer's second run to its first (A/A), round by round: %s (median %.2fx)", formatRatios(aa), median(aa))
	return []Row{{
		Figure:   fmt.Sprintf("ingest, %d sessions, vs ordered consumer (records/s)", S),
		Kind:     Rate,
		Ctxd:     median(ctxdRates),
		Baseline: median(orderedRates),
		Ratios:   vsOrdered,
		Target:   Target{MinRatio: 0.8},
	}, {
		Figure:   "ingest's resolution: the ordered consumer again, vs itself (A/A, records/s)",
		Kind:     Rate,
		Ctxd:     median(againRates),
		Baseline: median(orderedRates),
		Ratios:   aa,
	}, {
		Figure:   "ingest vs raw publish (records/s)",
		Kind:     Rate,
		Ctxd:     median(ctxdRates),
		Baseline: median(rawRates),
		Ratios:   vsRaw,
	}, {
		Figure:   "ingest vs bare durable consumer (records/s)",
		Kind:     Rate,
		Ctxd:     median(ctxdRates),
		Baseline: median(bareRates),
		Ratios:   vsBare,
	}}, nil
}

// ratios returns a[i]/b[i], round by round.
func ratios(a, b []float64) []float64 {
	out := make([]float64, min(len(a), len(b)))
	for i := range out {
		if b[i] > 0 {
			out[i] = a[i] / b[i]
		}
	}
	return out
}

// formatRatios writes ratios as the report does, "0.91x 1.02x ...".
func formatRatios(r []float64) string {
	parts := make([]string, len(r))
	for i, x := range r {
		parts[i] = formatRatio(x)
	}
	return strings.Join(parts, " ")
}

// ingestRound publishes n records to ctxd's stream, whose last sequence
// is last, and returns the records/s from the first publish until ctxd
// has applied the last.
func (b *bench) ingestRound(ctx context.Context, a *app.App, n int, last uint64, next func(int) (string, []byte)) (float64, error) {
	p, err := b.newPublisher()
	if err != nil {
		return 0, err
	}
	want := last + uint64(n)
	applied := make(chan error, 1)
	var end time.Time
	go func() {
		err := a.Wait(ctx, want, 10*time.Minute)
		end = time.Now()
		applied <- err
	}()
	start := time.Now()
	got, err := p.publish(ctx, n, next)
	published, appliedThen := time.Since(start), a.Store().Applied()
	if err == nil && got != want {
		err = fmt.Errorf("ingest: the last record was stored at %d, expected %d: is something else publishing?", got, want)
	}
	if werr := <-applied; err == nil && werr != nil {
		err = fmt.Errorf("ingest: waiting for ctxd to apply %d: %w", want, werr)
	}
	if err != nil {
		return 0, err
	}
	b.logf("ingest: ctxd: published in %v, %d of %d applied by then, all applied after %v",
		published.Round(time.Millisecond), appliedThen-last, n, end.Sub(start).Round(time.Millisecond))
	return float64(n) / end.Sub(start).Seconds(), nil
}

// orderedRound publishes n records to st while an ordered consumer,
// started at the first of them, takes every one and does nothing with
// it, and returns the records/s from the first publish until it has seen
// the last; name is the side's, for the log.
func (b *bench) orderedRound(ctx context.Context, name string, st jetstream.Stream, pullBytes, n int, next func(int) (string, []byte)) (float64, error) {
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	want := info.State.LastSeq + uint64(n)
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   info.State.LastSeq + 1,
	})
	if err != nil {
		return 0, err
	}
	var seen atomic.Uint64
	reached := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if seen.Add(1) == uint64(n) {
			close(reached)
		}
	}, jetstream.PullMaxMessagesWithBytesLimit(1000, pullBytes))
	if err != nil {
		return 0, err
	}
	defer cc.Stop()
	p, err := b.newPublisher()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	got, err := p.publish(ctx, n, next)
	published, seenThen := time.Since(start), seen.Load()
	if err != nil {
		return 0, err
	}
	if got != want {
		return 0, fmt.Errorf("ingest: the last record was stored at %d, expected %d: is something else publishing?", got, want)
	}
	select {
	case <-reached:
	case <-time.After(10 * time.Minute):
		return 0, fmt.Errorf("ingest: the %s took %d of %d records in 10 minutes", name, seen.Load(), n)
	}
	took := time.Since(start)
	b.logf("ingest: %s: published in %v, %d of %d seen by then, all seen after %v",
		name, published.Round(time.Millisecond), seenThen, n, took.Round(time.Millisecond))
	return float64(n) / took.Seconds(), nil
}

// profileSide starts a CPU profile of one side's round, when
// Config.IngestProfiles names a directory, and returns what stops it.
func (b *bench) profileSide(side string, round int) (stop func(), err error) {
	if b.cfg.IngestProfiles == "" {
		return func() {}, nil
	}
	if err := os.MkdirAll(b.cfg.IngestProfiles, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(b.cfg.IngestProfiles, fmt.Sprintf("%s-%d.prof", side, round+1)))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("ingest profiles: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// processCPU returns the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
