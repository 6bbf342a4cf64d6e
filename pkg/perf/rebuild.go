package perf

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// rebuild compares replaying the stream into fresh projections, as ctxd
// rebuild does, with a raw ordered consumer over the same stream, in
// alternating rounds.
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
	p, err := b.newPublisher()
	if err != nil {
		return nil, err
	}
	S, N := cfg.RebuildSessions, cfg.RebuildRecords
	per := (N + S - 1) / S
	recs, err := encode(newWorkload(7, 0, 0).sessionRecords(per))
	if err != nil {
		return nil, err
	}
	b.logf("rebuild: filling a stream of %d records over %d sessions", N, S)
	start := time.Now()
	if _, err := p.publish(ctx, N, func(i int) (string, []byte) {
		return fmt.Sprintf("%sr%d", subject.TranscriptsPrefix, i%S), recs[i/S]
	}); err != nil {
		return nil, err
	}
	b.logf("rebuild: filled in %v", time.Since(start).Round(time.Millisecond))

	raw := func() (int, error) {
		n, _, err := bus.Replay(ctx, b.js, def.Name, 1, func(bus.Msg) {})
		return n, err
	}
	rebuild := func() (int, error) {
		projs := map[string]*projection.Session{}
		dec := record.Decoder{}
		n, _, err := bus.Replay(ctx, b.js, def.Name, 1, func(m bus.Msg) {
			id, err := subject.SessionOf(m.Subject, subject.TranscriptsPrefix)
			if err != nil {
				return
			}
			p := projs[id]
			if p == nil {
				p = projection.New(projection.Options{})
				projs[id] = p
			}
			if v, err := dec.Decode(m.Data); err == nil {
				p.Apply(m.Seq, v)
			} else {
				p.Skip(m.Seq)
			}
		})
		if err == nil && len(projs) != S {
			err = fmt.Errorf("rebuild: %d sessions rebuilt, expected %d", len(projs), S)
		}
		return n, err
	}
	var rawRates, rebuildRates []float64
	for round := range cfg.Rounds {
		for k := range 2 {
			runtime.GC()
			f, rates := raw, &rawRates
			if (k+round)%2 == 1 {
				f, rates = rebuild, &rebuildRates
			}
			start := time.Now()
			n, err := f()
			if err != nil {
				return nil, err
			}
			if n != N {
				return nil, fmt.Errorf("rebuild: replayed %d records, expected %d", n, N)
			}
			*rates = append(*rates, float64(n)/time.Since(start).Seconds())
		}
		b.logf("rebuild: round %d: rebuild %.0f records/s, raw %.0f records/s", round+1, rebuildRates[round], rawRates[round])
	}
	runtime.GC()
	return []Row{{
		Figure:   fmt.Sprintf("rebuild %d records (records/s)", N),
		Kind:     Rate,
		Ctxd:     median(rebuildRates),
		Baseline: median(rawRates),
		Target:   Target{MinRatio: 0.8},
	}}, nil
}
