package main

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/pkg/importer"
)

// encoder makes the JSON of records in order, on a goroutine of its own,
// at most ahead records before the one asked for.
type encoder struct {
	ctx    context.Context
	recs   []importer.Record
	out    chan encoded
	sent   int // the records next returned from out
	cancel context.CancelFunc
	done   chan struct{}
}

type encoded struct {
	b   []byte
	err error
}

func encodeAhead(ctx context.Context, recs []importer.Record, ahead int) *encoder {
	ctx, cancel := context.WithCancel(ctx)
	e := &encoder{ctx: ctx, recs: recs, out: make(chan encoded, ahead), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		for i := range recs {
			b, err := recs[i].JSON()
			select {
			case e.out <- encoded{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return // the last record asked for: its error stops the publisher
			}
		}
	}()
	return e
}

// next returns the JSON of record i. The records are asked for in order,
// each once, as bus.Append does; another order makes the record's JSON
// here.
func (e *encoder) next(i int) ([]byte, error) {
	var r encoded
	if i != e.sent {
		r.b, r.err = e.recs[i].JSON()
	} else {
		select {
		case r = <-e.out:
			e.sent++
		case <-e.ctx.Done():
			return nil, e.ctx.Err()
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("encode record: %w", r.err)
	}
	return r.b, nil
}

// stop stops the encoder and waits for it.
func (e *encoder) stop() {
	e.cancel()
	<-e.done
}
