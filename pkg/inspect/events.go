package inspect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// events streams a session's progress as server-sent events: an event
// "seq" with the stream sequence of the session's last record, at once
// and whenever it moves. It reads no record: the last is found from the
// headers of the session's last message, then of those after it.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	id, ok := h.sessionOf(w, r)
	if !ok {
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		h.fail(w, r, http.StatusInternalServerError, errors.New("streaming is not supported by this server"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	flusher.Flush()
	tick := time.NewTicker(h.opt.Poll)
	defer tick.Stop()
	var applied, sent uint64
	first := true
	idle := 0
	for {
		if a := h.src.Applied(); first || a != applied {
			applied = a
			seq, err := h.last(r.Context(), id, a)
			if err == nil && seq != 0 && (first || seq != sent) {
				sent = seq
				fmt.Fprintf(w, "event: seq\ndata: %d\n\n", seq)
				flusher.Flush()
				idle = 0
			}
			first = false
		}
		if idle++; idle*int(h.opt.Poll/time.Millisecond) >= 15000 {
			fmt.Fprint(w, ": keep-alive\n\n") // proxies close silent streams
			flusher.Flush()
			idle = 0
		}
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-h.closed:
			return
		}
	}
}

// lastAt is a session's last record as found once the service had
// applied up to applied, shared by the event streams following it.
type lastAt struct {
	applied uint64
	done    chan struct{}
	seq     uint64
	err     error
}

// last returns the stream sequence of the session's last record once
// the service applied up to applied: found once for every page following
// the session, from the headers of the records after the last found
// before, so that following a session reads only what is new.
func (h *Handler) last(ctx context.Context, id string, applied uint64) (uint64, error) {
	h.mu.Lock()
	f := h.lasts[id]
	if f == nil || f.applied != applied {
		var prev *lastAt
		if f != nil {
			select {
			case <-f.done:
				if f.err == nil {
					prev = f
				}
			default:
			}
		}
		if len(h.lasts) >= 1024 {
			clear(h.lasts) // sessions no longer followed
		}
		f = &lastAt{applied: applied, done: make(chan struct{})}
		h.lasts[id] = f
		h.mu.Unlock()
		// Others wait for it: it goes on if this stream ends.
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if prev != nil && prev.seq != 0 {
			f.seq = prev.seq
			f.err = h.src.Sizes(c, id, prev.seq+1, math.MaxUint64, func(seq uint64, _ int) error {
				f.seq = seq
				return nil
			})
		} else {
			f.seq, f.err = h.src.Last(c, id)
		}
		cancel()
		close(f.done)
		return f.seq, f.err
	}
	h.mu.Unlock()
	select {
	case <-f.done:
		return f.seq, f.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// seqOf reads the {seq} of a path.
func seqOf(r *http.Request) (uint64, error) {
	s := r.PathValue("seq")
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a stream sequence", cut(s, 40))
	}
	return n, nil
}
