package removals

import (
	"context"
	"time"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/nats-io/nats.go"
)

// check reads the stream's state and verifies up to its last sequence,
// or, failing that (reads that fail for removalReadRetry, or removals no
// advisory told of), forgets every session and verifies up to need (a
// record already stored). It is the check under way f (begin): no lock
// is held while it reads, and it alone applies advisories until it ends.
func (r *Watcher) check(f chan struct{}, need uint64) {
	deadline := time.Now().Add(removalGrace)
	// Whatever its last read of the stream's state finds, every removal
	// made before that read began is applied when check returns:
	// verified, or every session forgotten.
	var read uint64
	var retryUntil time.Time // set by the first failed read
	wait := 50 * time.Millisecond
	defer func() {
		r.mu.Lock()
		r.checked.Store(read)
		r.flight = nil
		r.mu.Unlock()
		close(f)
	}()
	for {
		r.mu.Lock()
		counted := r.base + r.applied
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.ctx, removalCheckTimeout)
		read = r.reads.Add(1)
		removed, last, err := r.state(ctx)
		cancel()
		if err != nil && r.ctx.Err() == nil && (retryUntil.IsZero() || time.Now().Before(retryUntil)) {
			// Read again: a server slow to answer, or a stream between
			// leaders, answers in moments, and forgetting every session
			// would have each load back from that server at once. What
			// a removal made meanwhile took, the count read next says.
			if retryUntil.IsZero() {
				retryUntil = time.Now().Add(removalReadRetry)
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.stop:
			}
			t.Stop()
			wait = min(2*wait, time.Second)
			r.mu.Lock()
			r.drainLocked()
			r.mu.Unlock()
			continue
		}
		if err != nil {
			r.mu.Lock()
			if r.ctx.Err() != nil {
				// Closing: nothing applies records any more.
				r.forget()
			} else {
				r.forgetAll("the stream's state could not be read", "err", err)
			}
			r.mu.Unlock()
			r.raise(need)
			return
		}
		if int64(removed) == counted && last >= need {
			r.raise(last)
			return
		}
		if int64(removed) > counted && time.Now().Before(deadline) {
			// Removals not told yet: their advisories may be on their way.
			t := time.NewTimer(time.Until(deadline))
			r.busy.Add(1)
			select {
			case m := <-r.ch:
				r.mu.Lock()
				r.apply(m)
				r.mu.Unlock()
			case <-t.C:
			case <-r.stop:
			}
			r.busy.Add(-1)
			t.Stop()
			r.mu.Lock()
			r.drainLocked()
			r.mu.Unlock()
			continue
		}
		r.mu.Lock()
		if int64(removed) != counted {
			r.forgetAll("records left the stream that no advisory told of", "removed", removed, "told", counted)
			r.removed()
		} else {
			// The stream read is behind the record in hand (a replica
			// behind): what the stores hold is dropped instead.
			r.forgetAll("the stream's state is behind a record stored", "last_seq", last, "need", need)
		}
		// From here every removal counted in removed is applied.
		r.base = int64(removed) - r.applied
		r.mu.Unlock()
		r.raise(max(last, need))
		return
	}
}

// raise moves the verified sequence up to seq.
func (r *Watcher) raise(seq uint64) {
	for {
		cur := r.verified.Load()
		if seq <= cur || r.verified.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// apply applies one advisory; r.mu is held.
func (r *Watcher) apply(m *nats.Msg) {
	rm, ok, err := bus.ParseRemoval(m.Data, r.stream)
	if err != nil {
		// About the stream, but unreadable: what went is not known.
		r.forgetAll("an advisory about the stream does not decode", "err", err)
		r.removed()
		return
	}
	if !ok {
		return
	}
	r.applied += int64(rm.Count)
	r.removed()
	stores := r.stores()
	switch {
	case rm.All:
		for _, st := range stores {
			st.ForgetAll()
		}
	case rm.Session != "":
		for _, st := range stores {
			st.Forget(rm.Session)
		}
	default:
		for _, st := range stores {
			st.ForgetHolding(rm.Seq)
		}
	}
	r.logger.Info("records removed from the stream: the sessions concerned load from it again",
		"stream", r.stream, "session", rm.Session, "seq", rm.Seq, "all", rm.All, "messages", rm.Count)
}

// forgetAll forgets every session of both stores, and says why; r.mu
// is held.
func (r *Watcher) forgetAll(why string, args ...any) {
	r.forget()
	r.logger.Warn("every session loads from the stream again: "+why, args...)
}

// forget forgets every session of both stores; r.mu is held.
func (r *Watcher) forget() {
	for _, st := range r.stores() {
		st.ForgetAll()
	}
}
