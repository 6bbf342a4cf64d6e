package perf

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

// The soak's check refuses a reply below min_seq, one with another
// number of messages, and one whose messages differ from the agent's
// projection; it passes the reply the projection makes.
func TestSoak_Check(t *testing.T) {
	s := &soak{cfg: SoakConfig{CheckEvery: 1}}
	ss := &soakSession{
		name: "s",
		gen:  workload.New(1, workload.Profile{ScreenshotBytes: 400, ScreenshotEvery: 1, Screenshots: 1}),
		proj: projection.New(projection.Options{BrowserTools: projection.DefaultBrowserTools}),
	}
	seq := uint64(0)
	for i := range 5 {
		recs := ss.gen.CallPair()
		if i%2 == 1 {
			recs = ss.gen.BrowserTurn()
		}
		for _, v := range recs {
			seq += 3
			ss.proj.Apply(seq, v)
		}
		ss.turns++
	}
	msgs := ss.proj.Messages()
	require.NoError(t, s.check(ss, msgpackReply(t, seq, msgs), seq))
	require.NoError(t, s.check(ss, msgpackReply(t, seq+5, msgs), seq), "a later seq: other sessions' records")
	require.Equal(t, int64(2), s.checked.Load(), "both compared message by message")

	require.ErrorContains(t, s.check(ss, msgpackReply(t, seq-1, msgs), seq), "below min_seq")
	require.ErrorContains(t, s.check(ss, msgpackReply(t, seq, msgs[:len(msgs)-1]), seq), "reply of 9 messages")
	other := append([]any{}, msgs...)
	other[3] = record.NewMap("role", "user", "content", "not what was published")
	require.ErrorContains(t, s.check(ss, msgpackReply(t, seq, other), seq), "message 3 is")
	require.ErrorContains(t, s.check(ss, []byte{0x93}, seq), "not a map")
}
