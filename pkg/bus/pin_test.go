package bus_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/streams"
)

// pinEvents records what the pin hooks of one ingest were told.
type pinEvents struct {
	mu     sync.Mutex
	events []string
	pins   []string
}

func (e *pinEvents) hooks() bus.Pin {
	return bus.Pin{
		Gained: func(pin string, first uint64, resumed bool) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.events = append(e.events, fmt.Sprintf("gained resumed=%v", resumed))
			e.pins = append(e.pins, pin)
		},
		Lost: func(pin, reason string, refused bool) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.events = append(e.events, fmt.Sprintf("lost %s refused=%v", reason, refused))
		},
	}
}

func (e *pinEvents) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.events...)
}

// Two ingests on the pinned consumer: one of them gets every record, once,
// in order, and says it gained the pin; the other gets nothing. When the
// pin is taken away (unpinned, as a stopping instance does), the next
// record pins one of them anew, which gets every record after, once, in
// order; when that is the other, the old holder's next pull is refused
// and it says it lost the pin.
func TestIngest_Pinned(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := testContext(t)
	st := ensureTranscripts(t, js)
	cfg, err := streams.Ingest()
	require.NoError(t, err)
	cons, err := bus.EnsureConsumer(ctx, st, cfg)
	require.NoError(t, err)

	var col [2]collector
	var ev [2]pinEvents
	for i := range 2 {
		in, err := bus.StartIngest(cons, 0, nil, col[i].handle, nil, bus.WithPin(ev[i].hooks()))
		require.NoError(t, err)
		t.Cleanup(func() { in.Close() })
	}
	first := publishN(t, js, 30)
	require.Eventually(t, func() bool { return len(col[0].got())+len(col[1].got()) >= len(first) }, 20*time.Second, 5*time.Millisecond)
	holder := 0
	if len(col[1].got()) > 0 {
		holder = 1
	}
	require.Equal(t, first, col[holder].got(), "every record once, in order, to one ingest")
	require.Empty(t, col[1-holder].got(), "nothing to the other")
	require.Equal(t, []string{"gained resumed=false"}, ev[holder].list())
	require.Empty(t, ev[1-holder].list())

	require.NoError(t, st.UnpinConsumer(ctx, streams.IngestName, streams.IngestGroup))
	second := publishN(t, js, 30)
	require.Eventually(t, func() bool {
		n := 0
		for i := range 2 {
			for _, m := range col[i].got() {
				if m.seq >= second[0].seq {
					n++
				}
			}
		}
		return n >= len(second)
	}, 20*time.Second, 5*time.Millisecond)
	var after []published
	var gainedAgain int
	for i := range 2 {
		for _, m := range col[i].got() {
			if m.seq >= second[0].seq {
				after = append(after, m)
			}
		}
		for _, e := range ev[i].list() {
			if e == "gained resumed=false" {
				gainedAgain++
			}
		}
	}
	require.Equal(t, second, after, "the records after the unpin once, in order, to the new holder")
	require.Equal(t, 2, gainedAgain, "a new pin was gained")
	ev[0].mu.Lock()
	ev[1].mu.Lock()
	pins := append(append([]string(nil), ev[0].pins...), ev[1].pins...)
	ev[1].mu.Unlock()
	ev[0].mu.Unlock()
	require.Len(t, pins, 2)
	require.NotEqual(t, pins[0], pins[1], "the new pin is another")
	if len(ev[holder].pins) == 1 { // the other holds the pin now
		require.Eventually(t, func() bool {
			list := ev[holder].list()
			return len(list) >= 2 && list[1] == "lost pin id mismatch refused=true"
		}, 20*time.Second, 10*time.Millisecond, "the old holder's pull is refused")
	}
}
