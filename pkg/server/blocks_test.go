package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/protocol"
)

// Versions of a blockList made from each other's prefixes never see
// each other's items.
func TestBlockList_Prefix(t *testing.T) {
	var a blockList[int]
	for i := range 1300 {
		a.add(i)
	}
	for _, k := range []int{0, 1, 511, 512, 513, 1024, 1299, 1300} {
		b := a.prefix(k, false)
		require.Equal(t, k, b.len())
		b.add(-1)
		b.add(-2)
		for i := range 1300 {
			require.Equal(t, i, a.at(i), "k %d: a is as it was", k)
		}
		for i := range k {
			require.Equal(t, i, b.at(i))
		}
		require.Equal(t, -1, b.at(k))
		require.Equal(t, -2, b.at(k+1))
	}
	c := a.prefix(1300, true) // in place: appends past a's items
	for i := range 600 {
		c.add(10000 + i)
	}
	require.Equal(t, 1300, a.len())
	for i := range 1300 {
		require.Equal(t, i, a.at(i))
		require.Equal(t, i, c.at(i))
	}
	require.Equal(t, 10599, c.at(1899))
}

// An index's item is found only where and as it was.
func TestDigestIndex_Holds(t *testing.T) {
	var x digestIndex
	var c protocol.Chain
	items := []byte(`{"a":1},{"b":2},{"c":3}`)
	for _, e := range [][2]int{{0, 7}, {8, 15}, {16, 23}} {
		c = c.Next(items[e[0]:e[1]])
		x.chain.add(c)
		x.ends.add(e[1])
	}
	require.True(t, x.holds(items, 0, false))
	require.True(t, x.holds(items, 2, false))
	require.True(t, x.holds([]byte(`{"a":1},{"b":2},{"c":3},{"d":4}`), 2, false))
	require.False(t, x.holds([]byte(`{"a":1},{"b":9},{"c":3}`), 1, false))
	require.False(t, x.holds([]byte(`{"a":1},{"b":2}`), 2, false), "shorter")
	require.False(t, x.holds([]byte(`{"a":1} ,{"b":2},{"c":3}`), 1, false), "moved")
}
