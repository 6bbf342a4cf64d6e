package app

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
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

// The count leaves out the instances that said they stop while they
// still answer, and counts them again once they no longer do (or after
// leavingFor).
func TestBalancer_Count(t *testing.T) {
	b := &balancer{a: &App{Config: Config{Instance: "me:1"}}, leaving: map[string]time.Time{}}
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

// A notice that names this instance, by its name or its service id,
// leaves nobody out of its count.
func TestBalancer_NoticeOfItself(t *testing.T) {
	r := &roles{}
	for k := range 4 {
		r.parts = append(r.parts, &part{r: r, k: k})
	}
	b := &balancer{a: &App{Config: Config{Instance: "me:1"}, stream: "TRANSCRIPTS"}, r: r, runs: make([]*bus.Ingest, 4), leaving: map[string]time.Time{}}
	b.counted(map[string]string{"A": "me:1", "B": "h:2"})
	for _, h := range []Handback{
		{Stream: "TRANSCRIPTS", Partitions: 4, Instance: "me:1", ID: "A"},
		{Stream: "TRANSCRIPTS", Partitions: 4, Instance: "other:9", ID: "A"},
	} {
		data, err := json.Marshal(h)
		require.NoError(t, err)
		b.noticed(&nats.Msg{Data: data})
		require.Empty(t, b.leaving)
		require.Equal(t, 2, b.count())
	}
}

// A round that hands partitions back unpins them with no lock held: a
// handback notice that comes while the unpin request is outstanding is
// taken at once, not after the request.
func TestBalancer_NoLockWhileUnpinning(t *testing.T) {
	url := natstest.Start(t)
	cfg := DefaultConfig()
	cfg.NATSURL, cfg.Partitions, cfg.Instance = url, 2, "me:1"
	a := New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, a.Open(ctx))
	t.Cleanup(func() { a.Close() })
	b := a.roles.bal

	entered, release := make(chan int, 4), make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Close
	b.mu.Lock()
	unpin := b.unpinConsumer
	b.unpinConsumer = func(ctx context.Context, k int) error {
		entered <- k
		<-release
		return unpin(ctx, k)
	}
	b.mu.Unlock()

	// Records in both partitions: this instance, alone, holds both pins.
	nc := natstest.Connect(t, url)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for i := range 8 {
		_, err := js.Publish(ctx, fmt.Sprintf("transcripts.s%d", i), []byte(`{"role":"user","content":"x"}`))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return len(a.roles.owned()) == 2 }, 30*time.Second, 10*time.Millisecond)

	// A second instance: the surplus partition goes back.
	svc, err := micro.AddService(nc, micro.Config{Name: "ctxd", Version: "0.0.1",
		Metadata: map[string]string{"partitions": "2", "instance": "other:2"}})
	require.NoError(t, err)
	t.Cleanup(func() { svc.Stop() })
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("no partition handed back")
	}
	require.True(t, b.mu.TryLock(), "the balancer's lock is held while a pin is given back")
	b.mu.Unlock()

	// Another instance's notice is taken meanwhile.
	data, err := json.Marshal(Handback{Stream: a.stream, Partitions: 2, Instance: "third:3", ID: "T", HandedBack: []int{}})
	require.NoError(t, err)
	require.NoError(t, nc.Publish(HandbackSubject, data))
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		_, ok := b.leaving["T"]
		return ok
	}, 30*time.Second, 10*time.Millisecond)
	once.Do(func() { close(release) })
}
