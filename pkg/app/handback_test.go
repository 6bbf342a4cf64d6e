package app

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
// still answer, counts them again once they no longer do (or after
// leavingFor), and always counts this instance.
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

	// This instance before its service answers, or named as stopping by
	// another: counted all the same.
	b.counted(map[string]string{"B": "h:2"})
	require.Equal(t, 2, b.count())
	b.counted(map[string]string{"A": "me:1", "B": "h:2"})
	b.leaving["A"] = time.Now()
	require.Equal(t, 2, b.count())
	b.counted(nil)
	require.Equal(t, 1, b.count())
}
