package bus

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A delivery that skips stream sequences has the skipped ones read and
// handled first: every sequence once, in order; a failed read hands on
// nothing and is tried again with the next delivery.
func TestGapFiller(t *testing.T) {
	stream := map[uint64]bool{1: true, 2: true, 3: true, 4: true, 5: true, 7: true, 8: true, 9: true} // 6 deleted
	var handled []uint64
	var fail bool
	g := gapFiller{
		last:   2,
		handle: func(m Msg) { handled = append(handled, m.Seq) },
		read: func(from, to uint64, fn func(Msg) error) error {
			if fail {
				return errors.New("no route")
			}
			for s := from; s <= to; s++ {
				if stream[s] {
					if err := fn(Msg{Seq: s}); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	require.NoError(t, g.deliver(Msg{Seq: 3}))
	require.NoError(t, g.deliver(Msg{Seq: 5})) // 4 was lost
	fail = true
	require.Error(t, g.deliver(Msg{Seq: 9})) // 7 and 8 lost, and unreadable now
	fail = false
	require.NoError(t, g.deliver(Msg{Seq: 9})) // redelivered
	require.NoError(t, g.deliver(Msg{Seq: 2})) // an old redelivery is handed on for the store to ignore
	require.Equal(t, []uint64{3, 4, 5, 7, 8, 9, 2}, handled)
	require.Equal(t, uint64(9), g.last)
}
