package bus

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The gap filler of a partition reads the stream only when a delivery
// may have skipped one of the partition's records.
func TestDeliveryTrack(t *testing.T) {
	var g deliveryTrack
	// The first delivery of a run: unknown before it.
	g.see(1, 10, "a")
	require.False(t, g.nothingBetween(5, 9))
	// Read once (the filler's read clears the hole): then each delivery
	// right after the previous one, under the same pin, skipped nothing.
	g.hole = false
	g.see(2, 20, "a")
	require.True(t, g.nothingBetween(11, 19))
	require.False(t, g.nothingBetween(11, 18), "not up to the current message")
	require.False(t, g.nothingBetween(10, 19), "the previous message not handled")
	// A delivery missed (3 lost): read, and until a read, every range.
	g.see(4, 40, "a")
	require.False(t, g.nothingBetween(21, 39))
	g.see(5, 50, "a") // contiguous, but the hole is not read yet
	require.False(t, g.nothingBetween(41, 49))
	g.hole = false
	g.see(6, 60, "a")
	require.True(t, g.nothingBetween(51, 59))
	// Another pin: unknown.
	g.see(7, 70, "b")
	require.False(t, g.nothingBetween(61, 69))
	// A redelivery in between (an old stream sequence) does not vouch
	// for the records before it: the range starts past it only if the
	// filler handled past it.
	g.hole = false
	g.see(8, 15, "b")
	g.see(9, 80, "b")
	require.True(t, g.nothingBetween(71, 79))
	require.False(t, g.nothingBetween(12, 79), "from before the previous message")
}

// A nil track vouches for nothing: every gap is read.
func TestDeliveryTrack_Nil(t *testing.T) {
	var g *deliveryTrack
	g.see(2, 20, "a")
	g.read()
	require.False(t, g.nothingBetween(11, 19))
}

// The delivery sequence is the token after the stream sequence, in
// either form of the reply subject.
func TestConsumerSeq(t *testing.T) {
	for _, tt := range []struct {
		reply string
		seq   uint64
		ok    bool
	}{
		{"$JS.ACK.TRANSCRIPTS.ctxd.1.42.40.1764493200000000000.7", 40, true},
		{"$JS.ACK._.ABCDEF.TRANSCRIPTS.ctxd.3.42.40.1764493200000000000.7.xyz", 40, true},
		{"$JS.ACK.S.c.1.42.0.1.0", 0, false},
		{"$JS.ACK.S.c.1.42.x.1.0", 0, false},
		{"$JS.ACK.S.c.1.42", 0, false},
		{"_INBOX.abc", 0, false},
	} {
		seq, ok := consumerSeq(tt.reply)
		require.Equal(t, tt.ok, ok, tt.reply)
		require.Equal(t, tt.seq, seq, tt.reply)
	}
}
