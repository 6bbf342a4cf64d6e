package ownership

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/store"
)

// A handback notice is taken only when it is of this stream and its
// number of partitions, names an instance, and names partitions the
// stream has; anything else is an error, and nothing is taken from it.
func TestDecodeHandback(t *testing.T) {
	ok := `{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","id":"X","handed_back":[0,3]}`
	h, err := decodeHandback([]byte(ok), "TRANSCRIPTS", 4)
	require.NoError(t, err)
	require.Equal(t, Handback{Stream: "TRANSCRIPTS", Partitions: 4, Instance: "h:1", ID: "X", HandedBack: []int{0, 3}}, h)

	for name, data := range map[string]string{
		"empty":              ``,
		"not json":           `handback`,
		"not an object":      `[0,1]`,
		"list not a list":    `{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","handed_back":"all"}`,
		"partitions a word":  `{"stream":"TRANSCRIPTS","partitions":"4","instance":"h:1","handed_back":[0]}`,
		"another stream":     `{"stream":"OTHER","partitions":4,"instance":"h:1","handed_back":[0]}`,
		"another number":     `{"stream":"TRANSCRIPTS","partitions":8,"instance":"h:1","handed_back":[0]}`,
		"no instance":        `{"stream":"TRANSCRIPTS","partitions":4,"handed_back":[0]}`,
		"past the last":      `{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","handed_back":[4]}`,
		"negative":           `{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","handed_back":[-1]}`,
		"not an integer":     `{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","handed_back":[1.5]}`,
		"longer than P":      `{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","handed_back":[0,0,0,0,0]}`,
		"a huge list":        `{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","handed_back":[` + strings.Repeat("0,", 100000) + `0]}`,
		"a huge number":      `{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","handed_back":[99999999999999999999]}`,
		"truncated":          ok[:len(ok)-3],
		"partitions missing": `{"stream":"TRANSCRIPTS","instance":"h:1","handed_back":[0]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := decodeHandback([]byte(data), "TRANSCRIPTS", 4)
			require.Error(t, err)
		})
	}
}

// fakeConsumers are partitions' consumers whose pulls gain the pin at
// once, as a lone instance's do.
type fakeConsumers struct {
	unpin   func(ctx context.Context, k int, pin string) error // nil: nothing to do
	mu      sync.Mutex
	pulls   []int
	unpins  []int
	deleted bool
}

func (c *fakeConsumers) Pull(k int, h bus.Handler, pin bus.Pin) (Run, error) {
	c.mu.Lock()
	c.pulls = append(c.pulls, k)
	c.mu.Unlock()
	name := "pin-" + string(rune('a'+k))
	pin.Gained(name, 1, false)
	return &fakeRun{pin: name, hooks: pin}, nil
}

func (c *fakeConsumers) Unpin(ctx context.Context, k int, pin string) error {
	c.mu.Lock()
	c.unpins = append(c.unpins, k)
	unpin := c.unpin
	c.mu.Unlock()
	if unpin != nil {
		return unpin(ctx, k, pin)
	}
	return nil
}

func (c *fakeConsumers) Deleted(context.Context, int) bool { return c.deleted }

// fakeRun is a partition's ingest that holds its pin until closed.
type fakeRun struct {
	mu     sync.Mutex
	pin    string
	hooks  bus.Pin
	closed bool
}

func (r *fakeRun) Pinned() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ""
	}
	return r.pin
}

// Lose gives the pin up as bus.Ingest does: the hook hears it.
func (r *fakeRun) Lose(reason string, refused bool) {
	r.mu.Lock()
	pin := r.pin
	r.pin = ""
	r.mu.Unlock()
	if pin != "" && r.hooks.Lost != nil {
		r.hooks.Lost(pin, reason, refused)
	}
}

func (r *fakeRun) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

// fakePeers are the other instances: Live answers live, and the notices
// announced are kept.
type fakePeers struct {
	mu        sync.Mutex
	live      map[string]string
	announced []Handback
}

func (p *fakePeers) Live() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

func (p *fakePeers) setLive(live map[string]string) {
	p.mu.Lock()
	p.live = live
	p.mu.Unlock()
}

func (p *fakePeers) Announce(h Handback) error {
	p.mu.Lock()
	p.announced = append(p.announced, h)
	p.mu.Unlock()
	return nil
}

func (p *fakePeers) Listen(func(Handback)) (func(), error) { return func() {}, nil }

// noRemovals is a removal watcher of a stream that has had none.
type noRemovals struct{}

func (noRemovals) Ahead(uint64)                                                  {}
func (noRemovals) Cover(uint64)                                                  {}
func (noRemovals) Covered(uint64) bool                                           { return true }
func (noRemovals) Mark() uint64                                                  { return 0 }
func (noRemovals) Drain()                                                        {}
func (noRemovals) Settle(context.Context, bool, uint64) error                    { return nil }
func (noRemovals) Verified() uint64                                              { return 0 }
func (noRemovals) SettleSince(_ context.Context, _, upTo uint64) (uint64, error) { return upTo, nil }

// testRoles returns the roles of instance me:1 on a stream of P
// partitions, with stores that load nothing, and its balancer over the
// fakes (not started: the test runs its rounds).
func testRoles(t *testing.T, P int, cons Consumers, peers Peers) (*Roles, *balancer) {
	t.Helper()
	r := New(Config{
		Layout: bus.Layout{Stream: "TRANSCRIPTS", P: P}, Instance: "me:1",
		Logger: slog.New(slog.DiscardHandler), Life: t.Context(),
		NewStore: func() *store.Store {
			st := store.New()
			st.MaxBytes, st.MaxSessions = 1600, 160 // the cache's bounds, as the app's stores have them
			return st
		},
		CacheBytes: 1600, CacheSessions: 160,
	})
	r.Removals = noRemovals{}
	b := newBalancer(r, cons, peers)
	close(b.done) // no loop of rounds: the test runs them
	r.bal = b
	t.Cleanup(func() {
		for _, st := range r.HandBack() {
			st.Close()
		}
		for _, p := range r.parts {
			if st := p.feeding(); st != nil {
				st.Close()
			}
		}
		r.reader.Close()
	})
	return r, b
}

// The count leaves out the instances that said they stop while they
// still answer, and counts them again once they no longer do (or after
// leavingFor).
func TestBalancer_Count(t *testing.T) {
	b := &balancer{r: &Roles{cfg: Config{Instance: "me:1"}}, leaving: map[string]time.Time{}}
	b.counted(map[string]string{"A": "me:1", "B": "h:2", "C": "h:3"})
	require.Equal(t, 3, b.count())
	require.Equal(t, "A", b.self)

	// C says it stops (noticed): left out while it still answers.
	b.leaving["C"] = time.Now()
	require.Equal(t, 2, b.count())
	b.counted(map[string]string{"A": "me:1", "B": "h:2", "C": "h:3"})
	require.Equal(t, 2, b.count())
	// Gone: forgotten, and not counted.
	b.counted(map[string]string{"A": "me:1", "B": "h:2"})
	require.Empty(t, b.leaving)
	require.Equal(t, 2, b.count())

	// Still answering long after it said it stops: counted again.
	b.leaving["B"] = time.Now().Add(-leavingFor - time.Second)
	b.counted(map[string]string{"A": "me:1", "B": "h:2"})
	require.Equal(t, 2, b.count())

	// Nobody answering (this instance's service not open yet): 1.
	b.counted(nil)
	require.Equal(t, 1, b.count())
}

// An unpartitioned stream is the balancer's one partition: its consumer
// is pulled from at once and held however many instances are counted
// (ceil(1 / n) is 1); the connection lost gives the pin up, and the
// partition, still held, is not pulled from twice; at close the pin is
// given back and the ingest store returned.
func TestBalancer_OnePartition(t *testing.T) {
	cons := &fakeConsumers{}
	peers := &fakePeers{live: map[string]string{"A": "me:1", "B": "h:2", "C": "h:3"}}
	r, b := testRoles(t, 1, cons, peers)
	r.follow.noMore() // a follower reads a stream: none here
	b.round()
	require.Equal(t, []int{0}, r.Owned())
	require.NotNil(t, r.IngestStore())
	for range 3 {
		b.round()
	}
	require.Equal(t, []int{0}, r.Owned(), "never a surplus")
	require.Zero(t, b.moved.Load())
	require.Equal(t, int64(1), b.target.Load())

	r.Disconnected()
	require.Nil(t, r.IngestStore(), "not trusted while the connection is down")
	require.Empty(t, r.Owned())
	b.round()
	cons.mu.Lock()
	require.Equal(t, []int{0}, cons.pulls, "still held: pulled from once")
	cons.mu.Unlock()

	stores := r.HandBack()
	require.Len(t, stores, 1)
	for _, st := range stores {
		st.Close()
	}
	cons.mu.Lock()
	require.Equal(t, []int{0}, cons.unpins)
	cons.mu.Unlock()
	require.Empty(t, r.HandBack(), "once")
}

// A notice that names this instance, by its name or its service id,
// leaves nobody out of its count.
func TestBalancer_NoticeOfItself(t *testing.T) {
	_, b := testRoles(t, 4, &fakeConsumers{}, &fakePeers{})
	b.counted(map[string]string{"A": "me:1", "B": "h:2"})
	for _, h := range []Handback{
		{Stream: "TRANSCRIPTS", Partitions: 4, Instance: "me:1", ID: "A"},
		{Stream: "TRANSCRIPTS", Partitions: 4, Instance: "other:9", ID: "A"},
	} {
		b.noticed(h)
		require.Empty(t, b.leaving)
		require.Equal(t, 2, b.count())
	}
}

// Alone, an instance pulls from every partition; with a second one
// counted, it hands the surplus back after two rounds in a row, and
// only the surplus: its pin is given back and its pulls stop.
func TestBalancer_HandsTheSurplusBack(t *testing.T) {
	cons, peers := &fakeConsumers{}, &fakePeers{live: map[string]string{"A": "me:1"}}
	r, b := testRoles(t, 4, cons, peers)
	b.round()
	require.Equal(t, []int{0, 1, 2, 3}, r.Owned())
	require.Equal(t, int64(4), b.target.Load())

	peers.setLive(map[string]string{"A": "me:1", "B": "h:2"})
	b.round()
	require.Len(t, r.Owned(), 4, "one round over the target moves nothing")
	b.round()
	require.Equal(t, []int{0, 1}, r.Owned())
	require.Equal(t, int64(2), b.target.Load())
	require.Equal(t, int64(2), b.moved.Load())
	cons.mu.Lock()
	require.ElementsMatch(t, []int{2, 3}, cons.unpins)
	cons.mu.Unlock()
	b.mu.Lock()
	require.Nil(t, b.runs[2])
	require.Nil(t, b.runs[3])
	b.mu.Unlock()
}

// Another instance's notice makes one below its target pull from the
// partitions handed back at once, without waiting for a round.
func TestBalancer_TakesOverAHandback(t *testing.T) {
	cons, peers := &fakeConsumers{}, &fakePeers{}
	r, b := testRoles(t, 4, cons, peers)
	b.counted(map[string]string{"A": "me:1", "B": "h:2"})
	b.noticed(Handback{Stream: "TRANSCRIPTS", Partitions: 4, Instance: "h:2", ID: "B", HandedBack: []int{1, 3}})
	require.Equal(t, []int{1, 3}, r.Owned())
	require.Equal(t, 1, b.count(), "the instance that stops is left out")
}

// An instance that stops says which partitions it hands back before it
// gives their pins back, and returns their ingest stores.
func TestBalancer_CloseAnnouncesFirst(t *testing.T) {
	peers := &fakePeers{live: map[string]string{"A": "me:1"}}
	var cons *fakeConsumers
	cons = &fakeConsumers{unpin: func(context.Context, int, string) error {
		peers.mu.Lock()
		defer peers.mu.Unlock()
		require.Len(t, peers.announced, 1, "the notice before the unpins")
		return nil
	}}
	r, b := testRoles(t, 2, cons, peers)
	b.round()
	require.Equal(t, []int{0, 1}, r.Owned())
	stores := r.HandBack()
	require.Len(t, stores, 2)
	for _, st := range stores {
		st.Close()
	}
	require.Empty(t, r.Owned())
	require.Equal(t, []Handback{{Stream: "TRANSCRIPTS", Partitions: 2, Instance: "me:1", ID: "A", HandedBack: []int{0, 1}}}, peers.announced)
	cons.mu.Lock()
	require.ElementsMatch(t, []int{0, 1}, cons.unpins)
	cons.mu.Unlock()
}

// A round that hands partitions back unpins them with no lock held: a
// handback notice that comes while the unpin request is outstanding is
// taken at once, not after the request.
func TestBalancer_NoLockWhileUnpinning(t *testing.T) {
	entered, release := make(chan int, 4), make(chan struct{})
	var once sync.Once
	cons := &fakeConsumers{unpin: func(ctx context.Context, k int, _ string) error {
		entered <- k
		<-release
		return nil
	}}
	peers := &fakePeers{live: map[string]string{"A": "me:1"}}
	r, b := testRoles(t, 2, cons, peers)
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the roles' cleanup
	b.round()
	require.Equal(t, []int{0, 1}, r.Owned())

	// A second instance: the surplus partition goes back.
	peers.setLive(map[string]string{"A": "me:1", "B": "other:2"})
	b.round()
	rounds := make(chan struct{})
	go func() { b.round(); close(rounds) }()
	select {
	case <-entered:
	case <-t.Context().Done():
		t.Fatal("no partition handed back")
	}
	require.True(t, b.mu.TryLock(), "the balancer's lock is held while a pin is given back")
	b.mu.Unlock()

	// Another instance's notice is taken meanwhile.
	b.noticed(Handback{Stream: "TRANSCRIPTS", Partitions: 2, Instance: "third:3", ID: "T", HandedBack: []int{}})
	b.mu.Lock()
	_, ok := b.leaving["T"]
	b.mu.Unlock()
	require.True(t, ok)
	once.Do(func() { close(release) })
	<-rounds
}

// The partitions an instance holds share its cache bound: each
// partition's ingest store gets 1/ceil(P/N) of --cache-bytes and
// --cache-sessions, N as last counted (as if alone, P, before a count).
func TestPartitions_ShareTheCache(t *testing.T) {
	r, b := testRoles(t, 16, &fakeConsumers{}, &fakePeers{})

	r.parts[3].gained("pin-3", 1, false)
	st := r.parts[3].feeding()
	require.Equal(t, int64(100), st.MaxBytes, "before a count: as if this instance held all 16")
	require.Equal(t, 10, st.MaxSessions)

	b.target.Store(4) // 4 instances: at most 4 partitions each
	r.parts[5].gained("pin-5", 1, false)
	st = r.parts[5].feeding()
	require.Equal(t, int64(400), st.MaxBytes)
	require.Equal(t, 40, st.MaxSessions)
	require.Equal(t, int64(1600), r.reader.MaxBytes, "the reader's store keeps the whole bound")
}

// A handback notice from the network decodes to one the balancer can
// take, naming partitions the stream has, or to an error; never a panic.
func FuzzDecodeHandback(f *testing.F) {
	f.Add([]byte(`{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","id":"X","handed_back":[0,3]}`))
	f.Add([]byte(`{"stream":"TRANSCRIPTS","partitions":4,"instance":"h:1","handed_back":[4]}`))
	f.Add([]byte(`{"stream":"TRANSCRIPTS","partitions":4,"instance":"","handed_back":[]}`))
	f.Add([]byte(`[0,1]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeHandback(data, "TRANSCRIPTS", 4)
		if err != nil {
			return
		}
		require.Equal(t, "TRANSCRIPTS", h.Stream)
		require.Equal(t, 4, h.Partitions)
		require.NotEmpty(t, h.Instance)
		require.LessOrEqual(t, len(h.HandedBack), 4)
		for _, k := range h.HandedBack {
			require.True(t, k >= 0 && k < 4, "partition %d", k)
		}
	})
}
