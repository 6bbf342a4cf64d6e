package inspect

import (
	"context"
	"sync"
	"time"
)

// DefaultReadRate is the bytes a second the inspector's views read from
// the stream unless Options.ReadRate says otherwise.
const DefaultReadRate = 32 << 20

// pacer is a token bucket on bytes read, shared by every view: a read
// is charged after it is made (its size is known only then), and the
// next read waits until the bytes read are paid for at rate. So over any
// window the bytes read are at most burst + rate × the window + the
// largest read, whatever the views ask for.
type pacer struct {
	rate, burst float64

	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu    sync.Mutex
	level float64 // bytes that may be read at once; below zero, owed
	last  time.Time
}

func newPacer(rate, burst int) *pacer {
	return &pacer{rate: float64(rate), burst: float64(burst), level: float64(burst), now: time.Now, sleep: sleepCtx, last: time.Now()}
}

// wait waits until what was read is paid for: the read that follows may
// then be made.
func (p *pacer) wait(ctx context.Context) error {
	return p.charge(ctx, 0)
}

// charge counts n bytes read, then waits until they are paid for.
func (p *pacer) charge(ctx context.Context, n int) error {
	if p == nil {
		return ctx.Err()
	}
	p.mu.Lock()
	now := p.now()
	p.level = min(p.burst, p.level+now.Sub(p.last).Seconds()*p.rate)
	p.last = now
	p.level -= float64(n)
	owed := p.level
	p.mu.Unlock()
	if owed >= 0 {
		return ctx.Err()
	}
	return p.sleep(ctx, time.Duration(-owed/p.rate*float64(time.Second)))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// paced is the handler's Source: every byte it reads from the stream,
// records and the records the server loads to list their sizes, is
// charged to the pacer.
type paced struct {
	Source
	p *pacer
}

func (s paced) Sizes(ctx context.Context, session string, from, to uint64, fn func(seq uint64, size int) error) error {
	if err := s.p.wait(ctx); err != nil {
		return err
	}
	return s.Source.Sizes(ctx, session, from, to, func(seq uint64, size int) error {
		if err := fn(seq, size); err != nil {
			return err
		}
		return s.p.charge(ctx, size) // the server loaded the record to send its headers
	})
}

func (s paced) Last(ctx context.Context, session string) (uint64, error) {
	if err := s.p.wait(ctx); err != nil {
		return 0, err
	}
	return s.Source.Last(ctx, session)
}

func (s paced) Records(ctx context.Context, session string, to uint64, fn func(seq uint64, data []byte) error) error {
	if err := s.p.wait(ctx); err != nil {
		return err
	}
	return s.Source.Records(ctx, session, to, func(seq uint64, data []byte) error {
		if err := fn(seq, data); err != nil {
			return err
		}
		return s.p.charge(ctx, len(data))
	})
}

func (s paced) Record(ctx context.Context, seq uint64) (string, []byte, error) {
	if err := s.p.wait(ctx); err != nil {
		return "", nil, err
	}
	subj, data, err := s.Source.Record(ctx, seq)
	if err != nil {
		return "", nil, err
	}
	// Counted whatever: a request that ends makes the next read wait.
	s.p.charge(ctx, len(data))
	return subj, data, nil
}
