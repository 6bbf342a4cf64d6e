package app

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

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
