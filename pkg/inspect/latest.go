package inspect

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// viewKey names a latest page: a session as of at (0: all its records),
// with the records the service had applied when it was loaded.
type viewKey struct {
	session     string
	at, applied uint64
}

// flight is a load of a latest page in progress, which every request
// for it waits for rather than loading it too.
type flight struct {
	done chan struct{}
	pv   *pageView
	err  error
}

// cachedPages bounds the latest pages held, a page's previews (at most
// PageBytes) and a few hundred bytes a record each.
const cachedPages = 16

// latest returns the latest page of a session as of at: the one held
// while the service applied no record since it was loaded, else the one
// being loaded, else one it loads in a slot of MaxLoads (503 when none
// is free). It answers the request itself when it fails.
func (h *Handler) latest(w http.ResponseWriter, r *http.Request, id string, at uint64, base string) (*pageView, bool) {
	key := viewKey{session: id, at: at, applied: h.src.Applied()}
	h.mu.Lock()
	for _, e := range h.pages {
		if e.key == key {
			h.mu.Unlock()
			return e.pv, true
		}
	}
	f, joined := h.flights[key]
	if !joined {
		f = &flight{done: make(chan struct{})}
		h.flights[key] = f
	}
	h.mu.Unlock()
	if joined {
		select {
		case <-f.done:
		case <-r.Context().Done():
			return nil, false
		}
		if f.err != nil {
			h.loadFailed(w, r, f.err)
			return nil, false
		}
		return f.pv, true
	}
	release, ok := h.load(w, r)
	if ok {
		// Others may wait for this load: it goes on if this request
		// ends, until the handler closes.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
		go func() {
			select {
			case <-h.closed:
				cancel()
			case <-ctx.Done():
			}
		}()
		var v *View
		v, f.err = h.view(ctx, id, at)
		if f.err == nil {
			f.pv, f.err = h.pageView(ctx, v, base, 0)
		}
		cancel()
		release()
	} else {
		f.err = fmt.Errorf("%w: %d views are reading sessions, the most at once; try again shortly", ErrBusy, cap(h.loads))
	}
	h.mu.Lock()
	delete(h.flights, key)
	if f.err == nil {
		// The latest of its session and at replaces the one before.
		h.pages = slices.DeleteFunc(h.pages, func(e cachedPage) bool { return e.key.session == id && e.key.at == at })
		if len(h.pages) == cachedPages {
			h.pages = h.pages[1:]
		}
		h.pages = append(h.pages, cachedPage{key: key, pv: f.pv})
	}
	h.mu.Unlock()
	close(f.done)
	if !ok {
		return nil, false // answered 503
	}
	if f.err != nil {
		h.loadFailed(w, r, f.err)
		return nil, false
	}
	return f.pv, true
}

// cachedPage is a latest page held for the requests after the one that
// loaded it.
type cachedPage struct {
	key viewKey
	pv  *pageView
}
