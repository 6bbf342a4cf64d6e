package inspect

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/store"
)

// clock is a fake clock that a pacer's sleeps move forward.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return ctx.Err()
}

func fakePacer(rate, burst int) (*pacer, *clock) {
	c := &clock{now: time.Unix(1_000_000, 0)}
	p := newPacer(rate, burst)
	p.now, p.sleep, p.last = c.Now, c.Sleep, c.now
	return p, c
}

// TestPacer_Budget: over any run of reads, the bytes read by the time a
// read starts are at most the burst plus the rate times the time gone,
// and the pacer waits no longer than that asks.
func TestPacer_Budget(t *testing.T) {
	const rate, burst = 1 << 20, 256 << 10
	p, c := fakePacer(rate, burst)
	start := c.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	read := 0
	for i := range 2000 {
		require.NoError(t, p.wait(t.Context()))
		elapsed := c.Now().Sub(start).Seconds()
		require.LessOrEqual(t, float64(read), burst+rate*elapsed+1, "read %d starts", i)
		n := rng.IntN(512 << 10)
		if i%100 == 0 {
			n = 7 << 20 // a screenshot: read, then paid for
		}
		require.NoError(t, p.charge(t.Context(), n))
		read += n
	}
	elapsed := c.Now().Sub(start).Seconds()
	require.InDelta(t, float64(read-burst)/rate, elapsed, 0.001, "no wait past what the reads owe")
}

// TestPacer_Idle: a pacer left idle refills up to its burst, no more.
func TestPacer_Idle(t *testing.T) {
	p, c := fakePacer(1000, 5000)
	require.NoError(t, p.charge(t.Context(), 5000))
	before := c.Now()
	c.now = c.now.Add(time.Hour)
	require.NoError(t, p.charge(t.Context(), 5000), "the burst is back")
	require.Equal(t, before.Add(time.Hour), c.Now(), "without a wait")
	require.NoError(t, p.charge(t.Context(), 1000))
	require.Equal(t, before.Add(time.Hour+time.Second), c.Now(), "past it, a second per 1000 bytes")
}

// fake is a Source of one session of large records, counting what it
// lists and reads.
type fake struct {
	mu      sync.Mutex
	sizes   []sized
	froms   []uint64 // the from of each Sizes
	listed  int      // bytes of the records listed
	read    int      // bytes of the records read
	lasts   int
	applied uint64
	fail    int // Sizes fails after listing this many records, when not 0
}

func (f *fake) Records(ctx context.Context, session string, to uint64, fn func(uint64, []byte) error) error {
	return fmt.Errorf("not read whole")
}

func (f *fake) Sizes(ctx context.Context, session string, from, to uint64, fn func(uint64, int) error) error {
	f.mu.Lock()
	f.froms = append(f.froms, from)
	rows := append([]sized(nil), f.sizes...)
	fail := f.fail
	f.mu.Unlock()
	n := 0
	for _, r := range rows {
		if r.seq < from || r.seq > to {
			continue
		}
		if n++; fail != 0 && n > fail {
			return fmt.Errorf("listing cut")
		}
		f.mu.Lock()
		f.listed += r.size
		f.mu.Unlock()
		if err := fn(r.seq, r.size); err != nil {
			return err
		}
	}
	return nil
}

func (f *fake) Last(ctx context.Context, session string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lasts++
	return f.sizes[len(f.sizes)-1].seq, nil
}

func (f *fake) Record(ctx context.Context, seq uint64) (string, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.sizes {
		if r.seq == seq {
			data := fmt.Appendf(nil, `{"role":"user","content":%q}`, make([]byte, max(r.size-30, 0)))
			f.read += len(data)
			return "transcripts.big", data, nil
		}
	}
	return "", nil, fmt.Errorf("no record at seq %d", seq)
}

func (f *fake) Sessions(context.Context) ([]SessionRef, error)      { return nil, nil }
func (f *fake) Summary(context.Context, string) (Summary, error)    { return Summary{}, nil }
func (f *fake) Rejected(context.Context) ([]store.Rejection, error) { return nil, nil }
func (f *fake) Applied() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied
}

func (f *fake) add(size int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sizes = append(f.sizes, sized{seq: uint64(len(f.sizes) + 1), size: size})
	f.applied++
}

// TestHandler_ReadRate: the views of a session of screenshots list it
// within the read rate, every byte the server loads for them counted,
// and a view after another record lists only that record.
func TestHandler_ReadRate(t *testing.T) {
	src := &fake{}
	for range 40 {
		src.add(7 << 20)
	}
	const rate = 32 << 20
	h := New(src, Options{ReadRate: rate, Config: DefaultConfig()})
	p, c := fakePacer(rate, h.opt.ReadBytes)
	h.src = paced{Source: src, p: p}
	start := c.Now()
	get := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/ui/sessions/big", nil))
		return w.Code
	}
	require.Equal(t, http.StatusOK, get())
	require.Equal(t, 280<<20, src.listed, "every record listed once")
	owed := float64(src.listed+src.read-h.opt.ReadBytes) / rate
	require.InDelta(t, owed, c.Now().Sub(start).Seconds(), float64(7<<20)/rate, "listed at the read rate")

	src.add(512)
	before := c.Now()
	require.Equal(t, http.StatusOK, get())
	require.Equal(t, []uint64{1, 41}, src.froms, "the next view lists only the record after")
	require.Equal(t, 280<<20+512, src.listed)
	require.Less(t, c.Now().Sub(before).Seconds(), 0.1)

	// A view as of an earlier record lists nothing again.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/ui/sessions/big?at=20&format=json", nil))
	require.Equal(t, http.StatusOK, w.Code)
	require.Len(t, src.froms, 2, "the records up to 20 were listed")
	require.Contains(t, w.Body.String(), `"seq":20`)
}

// TestHandler_EventsReadNoRecords: following a session finds its last
// record from the headers of the last message, then of those after the
// last found; it lists the session's records no more.
func TestHandler_EventsReadNoRecords(t *testing.T) {
	src := &fake{}
	for range 40 {
		src.add(7 << 20)
	}
	h := New(src, Options{Config: DefaultConfig()})
	seq, err := h.last(t.Context(), "big", src.Applied())
	require.NoError(t, err)
	require.Equal(t, uint64(40), seq)
	require.Equal(t, 1, src.lasts)
	require.Zero(t, src.listed, "no record listed")
	src.add(100)
	seq, err = h.last(t.Context(), "big", src.Applied())
	require.NoError(t, err)
	require.Equal(t, uint64(41), seq)
	require.Equal(t, []uint64{41}, src.froms, "only what is new")
	require.Equal(t, 100, src.listed)
	require.Zero(t, src.read)
}

// TestHandler_ListingGoesOn: a listing cut short (a view's time ran out)
// is held as far as it went, and the next view lists on from there.
func TestHandler_ListingGoesOn(t *testing.T) {
	src := &fake{fail: 25}
	for range 40 {
		src.add(1 << 20)
	}
	h := New(src, Options{ReadRate: -1, Config: DefaultConfig()})
	_, err := h.view(t.Context(), "big", 0)
	require.ErrorContains(t, err, "listing cut")
	src.fail = 0
	v, err := h.view(t.Context(), "big", 0)
	require.NoError(t, err)
	require.Len(t, v.Rows, 40)
	require.Equal(t, []uint64{1, 26}, src.froms, "listed on from where it stopped")
	require.Equal(t, 40<<20, src.listed)
}
