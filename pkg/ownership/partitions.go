package ownership

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
	"github.com/ctxd/ctxd/pkg/subject"
	"github.com/ctxd/ctxd/streams"
)

// handlePart returns the handler of partition p's records: each is
// applied to its session in the partition's ingest store, and one whose
// subject is not of the partition (published to transcripts.<k>.<s>
// directly, with the wrong k) is rejected.
func (r *Roles) handlePart(p *part) bus.Handler {
	P := len(r.parts)
	return func(m bus.Msg) {
		r.Removals.Cover(m.Seq) // package removals
		st := p.feeding()
		if st == nil {
			return // the pin was given up while the record was in hand
		}
		session, k, err := subject.SessionOfStored(m.Subject)
		if err == nil && (k != p.k || subject.Partition(session, P) != k) {
			err = fmt.Errorf("%w: subject %q is not of partition %d of %d", subject.ErrBadSession, m.Subject, p.k, P)
		}
		if err != nil {
			st.Reject(store.Rejection{Subject: m.Subject, Seq: m.Seq, Size: len(m.Data), Reason: err.Error(), Kind: store.KindSubject})
			return
		}
		st.Apply(session, m.Seq, m.Data)
	}
}

// release stops trusting the ingest store and takes it from the part:
// the caller writes its checkpoints and closes it. Records of the pin
// still delivered are not applied to it, and a refusal of the pin (its
// pulls, after the unpin) does not close it under the caller.
func (r *part) release(reason string) *store.Store {
	r.lost(reason, false)
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.feed.Swap(nil)
	if st != nil {
		r.retire(st)
	}
	return st
}

// drop lets the ingest store go: the partition is not held, and its
// store missed records since.
func (r *part) drop() {
	r.mu.Lock()
	if r.owner.Load() != nil {
		r.r.cfg.Logger.Error("partition dropped while trusted", "partition", r.k)
		if st := r.owner.Swap(nil); st != nil {
			r.raise(st.Applied())
		}
	}
	r.route(false)
	old := r.feed.Swap(nil)
	if old != nil {
		r.retire(old)
	}
	r.pin = ""
	r.change()
	r.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// PartitionLag says why the partitions this instance applies are not
// ready: more records not yet applied, over all of them, than max. A
// partition's watermark does not move with the other partitions'
// records, so the lag is its consumer's: the records not delivered yet
// and those delivered but not acknowledged.
func (r *Roles) PartitionLag(ctx context.Context, max uint64) error {
	var names []string
	for _, k := range r.Owned() {
		names = append(names, streams.PartitionName(k))
	}
	behind, err := r.cfg.Stream.Lag(ctx, names...)
	if err != nil {
		return err
	}
	if behind > max {
		return fmt.Errorf("catching up: %d records of the partitions held not applied yet (more than %d)", behind, max)
	}
	return nil
}
