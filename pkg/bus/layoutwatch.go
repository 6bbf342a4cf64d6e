package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// An instance reads a session's records on the subjects of the stream's
// layout as it was when the instance started (Layout): the number of
// partitions, and the sequence before which records stay on their
// unpartitioned subject. `ctxd partition` changes the layout of a
// stream in use: records stored after it go to partitioned subjects that
// an instance started before never reads, so a reply it built from the
// old subjects would miss them. ctxd partition refuses while instances
// answer for the stream; an instance that meets a changed layout anyway
// (one that did not answer the count, or started while it ran) stops
// answering at once and stops loudly, so that a supervisor starts it
// again on the new layout.
//
// It learns of the change from the audit advisory of the stream's update
// (at once), and from the stream's configuration read every
// layoutCheckEvery (when advisories are denied or lost).

// layoutCheckEvery is how often the stream's layout is read again.
const layoutCheckEvery = 2 * time.Second

// ErrLayoutChanged is why an instance stops when the stream's layout is
// not the one it started with.
var ErrLayoutChanged = errors.New("the stream's partitions changed since this instance started")

// LayoutWatch tells when the stream's layout changes.
type LayoutWatch struct {
	ctx     context.Context                             // the app's: its end stops a read under way
	read    func(context.Context) (Layout, bool, error) // the layout now; false: no stream
	have    Layout
	logger  *slog.Logger
	changed func(error) // told once, from the watch's goroutine

	sub  *nats.Subscription
	poke chan struct{}
	stop chan struct{}
	done chan struct{}
}

// WatchLayout starts watching the stream, whose layout at the start is
// have: changed is told once, from the watch's goroutine, when it is
// not any more. ctx's end stops a read under way. An error to subscribe
// to the advisories leaves the periodic read.
func (s *Stream) WatchLayout(ctx context.Context, have Layout, logger *slog.Logger, changed func(error)) *LayoutWatch {
	w := &LayoutWatch{ctx: ctx, read: s.ReadLayout, have: have, logger: logger, changed: changed,
		poke: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	update := []byte(`"$JS.API.STREAM.UPDATE.` + have.Stream + `"`)
	sub, err := s.nc.Subscribe(AuditAdvisory, func(m *nats.Msg) {
		if bytes.Contains(m.Data, update) {
			select {
			case w.poke <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		logger.Warn("stream updates: not listening; the layout is read every "+layoutCheckEvery.String(), "err", err)
	}
	w.sub = sub
	go w.run()
	return w
}

func (w *LayoutWatch) run() {
	defer close(w.done)
	t := time.NewTicker(layoutCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.poke:
		case <-t.C:
		}
		if err := w.check(); err != nil {
			w.changed(err)
			return
		}
	}
}

// check reads the stream's configuration and returns ErrLayoutChanged,
// with what changed, when its layout is not the one the instance has.
func (w *LayoutWatch) check() error {
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
	defer cancel()
	now, ok, err := w.read(ctx)
	switch {
	case err == nil && !ok:
		return nil // a stream deleted: the checkpoints' identity and the consumer say so
	case err != nil && !ok:
		w.logger.Debug("stream layout not read", "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("%w: stream %s: %w", ErrLayoutChanged, w.have.Stream, err)
	}
	if now.P != w.have.P || now.After != w.have.After {
		return fmt.Errorf("%w: stream %s has %d partition(s) (records up to %d on unpartitioned subjects), this instance started with %d (up to %d); start it again",
			ErrLayoutChanged, w.have.Stream, now.P, now.After, w.have.P, w.have.After)
	}
	return nil
}

// Close stops the watch and waits for it.
func (w *LayoutWatch) Close() {
	if w == nil {
		return
	}
	close(w.stop)
	<-w.done
	if w.sub != nil {
		w.sub.Unsubscribe()
	}
}
