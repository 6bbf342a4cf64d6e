package perf

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/rebuild"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// rebuildPeriod is how many records of a session come between two of its
// compactions in the rebuild stream: real transcripts hold some, and a
// checkpoint rebuild decodes those.
const rebuildPeriod = 100

// rebuildProfile makes the rebuild stream's records: no screenshots, the
// figure counts records.
var rebuildProfile = workload.Default.WithScreenshots(0, 0)

// rebuild compares, in rotating rounds, a raw ordered consumer over the
// stream with what ctxd rebuild does over the same stream: gathering the
// sessions' checkpoints and writing them (the first row, the command's
// real work), and rebuilding whole projections as --check does (the
// second row).
func (b *bench) rebuild(ctx context.Context) ([]Row, error) {
	cfg := b.cfg
	if err := b.reset(ctx); err != nil {
		return nil, err
	}
	def, err := streams.Transcripts()
	if err != nil {
		return nil, err
	}
	if _, err := bus.EnsureStream(ctx, b.js, def); err != nil {
		return nil, err
	}
	if err := b.fillRebuildStream(ctx); err != nil {
		return nil, err
	}
	bucket, err := bus.OpenCheckpoints(ctx, b.js, 0)
	if err != nil {
		return nil, err
	}
	N := cfg.RebuildRecords
	r := &rebuildRuns{ctx: ctx, js: b.js, stream: def.Name, bucket: bucket, sessions: cfg.RebuildSessions}
	runs := []func() (int, error){r.raw, r.checkpoints, r.full}
	rates := make([][]float64, len(runs))
	for round := range cfg.Rounds {
		// Each round starts with a different one, so that none always
		// follows the same other.
		for k := range runs {
			i := (k + round) % len(runs)
			rate, err := timeReplay(runs[i], N)
			if err != nil {
				return nil, err
			}
			rates[i] = append(rates[i], rate)
		}
		b.logf("rebuild: round %d: checkpoints %.0f records/s (writing them %v), full projections %.0f records/s, raw %.0f records/s",
			round+1, rates[1][round], r.wrote.Round(time.Millisecond), rates[2][round], rates[0][round])
	}
	runtime.GC()
	if !maps.Equal(r.gathered, r.built) {
		return nil, errors.New("rebuild: the checkpoints gathered differ from those of the whole projections")
	}
	return []Row{{
		Figure:   fmt.Sprintf("rebuild %d records, checkpoints (records/s)", N),
		Kind:     Rate,
		Ctxd:     median(rates[1]),
		Baseline: median(rates[0]),
		Target:   Target{MinRatio: 0.8},
	}, {
		Figure:   fmt.Sprintf("rebuild %d records, full projections (records/s)", N),
		Kind:     Rate,
		Ctxd:     median(rates[2]),
		Baseline: median(rates[0]),
	}}, nil
}

// rebuildRuns are the replays the rebuild figure compares, each over the
// whole stream.
type rebuildRuns struct {
	ctx      context.Context
	js       jetstream.JetStream
	stream   string
	bucket   *bus.Checkpoints
	sessions int // expected in the stream

	// The last checkpoints of each kind of rebuild, which must agree.
	gathered, built map[string]store.Checkpoint
	wrote           time.Duration // writing the checkpoints, in the last run
}

// raw is the baseline: an ordered consumer whose handler does nothing.
func (r *rebuildRuns) raw() (int, error) {
	n, _, err := bus.Replay(r.ctx, r.js, r.stream, 1, func(bus.Msg) {})
	return n, err
}

// checkpoints is what ctxd rebuild does: it gathers every session's
// checkpoint and writes them.
func (r *rebuildRuns) checkpoints() (int, error) {
	cps := rebuild.NewCheckpoints()
	n, _, err := bus.Replay(r.ctx, r.js, r.stream, 1, func(m bus.Msg) {
		if id, err := subject.SessionOf(m.Subject, subject.TranscriptsPrefix); err == nil {
			cps.Add(id, m.Seq, m.Data)
		}
	})
	if err != nil {
		return n, err
	}
	if len(cps.Sessions) != r.sessions {
		return n, fmt.Errorf("rebuild: %d checkpoints gathered, expected %d", len(cps.Sessions), r.sessions)
	}
	r.gathered = map[string]store.Checkpoint{}
	for id, cp := range cps.Sessions {
		r.gathered[id] = *cp
	}
	start := time.Now()
	err = rebuild.Write(r.ctx, r.bucket, cps.Sessions)
	r.wrote = time.Since(start)
	return n, err
}

// full rebuilds every session's whole projection, as ctxd rebuild --check
// does before comparing.
func (r *rebuildRuns) full() (int, error) {
	projs := rebuild.NewProjections(projection.Options{}, store.DefaultLimits(), runtime.GOMAXPROCS(0))
	n, _, err := bus.Replay(r.ctx, r.js, r.stream, 1, func(m bus.Msg) {
		if id, err := subject.SessionOf(m.Subject, subject.TranscriptsPrefix); err == nil {
			projs.Add(id, m.Seq, m.Data)
		}
	})
	sessions := projs.Close()
	if err == nil && len(sessions) != r.sessions {
		err = fmt.Errorf("rebuild: %d sessions rebuilt, expected %d", len(sessions), r.sessions)
	}
	r.built = map[string]store.Checkpoint{}
	for id, s := range sessions {
		r.built[id] = s.Checkpoint()
	}
	return n, err
}

// fillRebuildStream publishes RebuildRecords records spread evenly over
// RebuildSessions sessions, each session holding a compaction every
// rebuildPeriod records, the sessions' records interleaved.
func (b *bench) fillRebuildStream(ctx context.Context) error {
	S, N := b.cfg.RebuildSessions, b.cfg.RebuildRecords
	p, err := b.newPublisher()
	if err != nil {
		return err
	}
	recs, err := workload.Encode(workload.New(7, rebuildProfile).Cycle(rebuildPeriod))
	if err != nil {
		return err
	}
	b.logf("rebuild: filling a stream of %d records over %d sessions", N, S)
	start := time.Now()
	if _, err := p.publish(ctx, N, func(i int) (string, []byte) {
		return fmt.Sprintf("%sr%d", subject.TranscriptsPrefix, i%S), recs[(i/S)%len(recs)]
	}); err != nil {
		return err
	}
	b.logf("rebuild: filled in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// timeReplay runs one replay of the whole stream of n records, from a
// collected heap, and returns its rate.
func timeReplay(run func() (int, error), n int) (float64, error) {
	runtime.GC()
	start := time.Now()
	got, err := run()
	if err != nil {
		return 0, err
	}
	if got != n {
		return 0, fmt.Errorf("rebuild: replayed %d records, expected %d", got, n)
	}
	return float64(got) / time.Since(start).Seconds(), nil
}
