package inspect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/subject"
)

// view loads a session as of at (0: all its records): it lists the
// records' sizes, then reads them all and explains them when they fit in
// ReadBytes; else it returns the list, unexplained, for pageView to read
// what a page shows.
func (h *Handler) view(ctx context.Context, id string, at uint64) (*View, error) {
	if err := subject.CheckSession(id); err != nil {
		return nil, err
	}
	to := at
	if to == 0 {
		to = math.MaxUint64
	}
	// The records listed before are not listed again: a session's stored
	// records only grow, and a view of it as it is now lists only those
	// stored since.
	known, from := h.listed(id, to)
	rows := make([]Row, len(known), len(known)+1)
	total := 0
	for i, k := range known {
		rows[i].Seq, rows[i].Size = k.seq, k.size
		total += k.size
	}
	if len(rows) > h.opt.MaxRecords {
		return nil, h.tooLong(id)
	}
	if from <= to {
		err := h.src.Sizes(ctx, id, from, to, func(seq uint64, size int) error {
			if len(rows) == h.opt.MaxRecords {
				return h.tooLong(id)
			}
			row := Row{Size: size}
			row.Seq = seq
			rows = append(rows, row)
			total += size
			return nil
		})
		if err != nil {
			// Those listed are every record up to the last of them: the
			// next view lists on from there, however long the session
			// takes to list.
			if len(rows) > len(known) {
				h.keepListed(id, rows)
			}
			return nil, fmt.Errorf("read session %s: %w", id, err)
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("session %s: %w", id, ErrNoSession)
	}
	if to == math.MaxUint64 || len(rows) > len(known) {
		h.keepListed(id, rows)
	}
	last := rows[len(rows)-1].Seq
	if total <= h.opt.ReadBytes {
		release, err := h.reading(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		// Up to the last record listed: one stored since would take the
		// read past what was weighed.
		return Load(ctx, &bounded{r: h.src, to: last, left: h.opt.ReadBytes}, id, at, h.opt.Config)
	}
	v := &View{Session: id, At: at, Seq: last, Rows: rows}
	v.Cut = fmt.Sprintf("The session's %d records up to seq %d hold %s, more than the %s a view reads: "+
		"they are listed without their fates, and a page shows those of its records that fit in %s, newest first, of at most %s each. "+
		"Every fate: ctxd inspect %s; the context: ctxd context %s.",
		len(rows), last, mib(total), mib(h.opt.ReadBytes), mib(h.opt.ReadBytes), mib(h.opt.ReadRecordBytes), id, id)
	for i := range v.Rows {
		v.Rows[i].Status = StatusUnexplained
		v.Rows[i].Rule = "not explained: the session holds more than a view reads"
	}
	return v, nil
}

func (h *Handler) tooLong(id string) error {
	return fmt.Errorf("%w: session %s has more than the %d records a view lists; read it whole with ctxd inspect %s, or its context with ctxd context %s",
		ErrTooLong, id, h.opt.MaxRecords, id, id)
}

// sized is a record listed by sequence and size.
type sized struct {
	seq  uint64
	size int
}

// listing is a session's records as listed last: every one up to the
// last's sequence.
type listing struct {
	session string
	rows    []sized
}

// listedSessions bounds the listings held, MaxRecords rows of 16 bytes at
// most each.
const listedSessions = 16

// listed returns the records of the session listed before, up to to, and
// the sequence to list from for the rest.
func (h *Handler) listed(id string, to uint64) ([]sized, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.listings {
		if l.session != id {
			continue
		}
		n, _ := slices.BinarySearchFunc(l.rows, to, func(r sized, to uint64) int {
			if r.seq <= to {
				return -1
			}
			return 1
		})
		from := l.rows[len(l.rows)-1].seq + 1
		if n < len(l.rows) {
			from = to + 1 // the records up to to are all listed
		}
		return l.rows[:n:n], from
	}
	return nil, 1
}

// keepListed holds the records a view listed, for the next view of the
// session to list only those after them.
func (h *Handler) keepListed(id string, rows []Row) {
	out := make([]sized, len(rows))
	for i, r := range rows {
		out[i] = sized{seq: r.Seq, size: r.Size}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, l := range h.listings {
		if l.session == id {
			if l.rows[len(l.rows)-1].seq > out[len(out)-1].seq {
				return // a longer one was kept meanwhile
			}
			h.listings = slices.Delete(h.listings, i, i+1)
			break
		}
	}
	if len(h.listings) == listedSessions {
		h.listings = h.listings[1:]
	}
	h.listings = append(h.listings, listing{session: id, rows: out})
}

// forgetListed drops a session's listing: a read of it failed, and a
// record listed may be gone (purged); the next view lists it afresh.
func (h *Handler) forgetListed(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.listings = slices.DeleteFunc(h.listings, func(l listing) bool { return l.session == id })
}

// reading waits for the one slot of the view reading records, so that
// views read one after the other rather than take every core from the
// service together.
func (h *Handler) reading(ctx context.Context) (release func(), err error) {
	select {
	case h.reads <- struct{}{}:
		return func() { <-h.reads }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ErrReadBound is the error of a view whose read of a session's records
// went past Options.ReadBytes.
var ErrReadBound = errors.New("past the bytes a view reads")

// bounded reads a session's records up to a sequence, and fails once
// they hold more than left bytes.
type bounded struct {
	r    Reader
	to   uint64
	left int
}

func (b *bounded) Records(ctx context.Context, session string, to uint64, fn func(seq uint64, data []byte) error) error {
	return b.r.Records(ctx, session, min(to, b.to), func(seq uint64, data []byte) error {
		if b.left -= len(data); b.left < 0 {
			return fmt.Errorf("record at seq %d: %w", seq, ErrReadBound)
		}
		return fn(seq, data)
	})
}

// mib is a size for people.
func mib(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// fill reads and decodes the records of shown, rows of an unexplained
// view, newest first, as long as they fit in ReadBytes, each of at most
// ReadRecordBytes; the others keep no value, and the page links to their
// raw record.
func (h *Handler) fill(ctx context.Context, session string, shown []Row) error {
	release, err := h.reading(ctx)
	if err != nil {
		return err
	}
	defer release()
	dec := h.opt.Config.Limits.Decoder()
	left := h.opt.ReadBytes
	for i := len(shown) - 1; i >= 0; i-- {
		row := &shown[i]
		if row.Size > left || row.Size > h.opt.ReadRecordBytes {
			continue
		}
		subj, data, err := h.src.Record(ctx, row.Seq)
		if err != nil {
			h.forgetListed(session)
			return fmt.Errorf("read session %s: %w", session, err)
		}
		if sid, _, err := subject.SessionOfStored(subj); err != nil || sid != session {
			h.forgetListed(session)
			return fmt.Errorf("session %s: seq %d is a record of %s", session, row.Seq, subj)
		}
		left -= len(data)
		v, err := dec.Decode(data)
		if err != nil {
			row.Class, row.Status, row.Rule = "undecodable", StatusRejected, err.Error()
			continue
		}
		row.Value, row.Class = v, projection.Class(v)
	}
	return nil
}

func (h *Handler) loadFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, ErrBusy) {
		w.Header().Set("Retry-After", "2")
		h.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	if errors.Is(err, ErrNoSession) {
		h.fail(w, r, http.StatusNotFound, err)
		return
	}
	if errors.Is(err, ErrTooLong) {
		h.fail(w, r, http.StatusRequestEntityTooLarge, err)
		return
	}
	h.fail(w, r, http.StatusBadGateway, err)
}
