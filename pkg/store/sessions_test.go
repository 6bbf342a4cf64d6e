package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A pass of the directory lets lookups in while it goes round the
// slots: Apply and View look their session up all the time.
func TestDirectory_SweepLetsLookupsIn(t *testing.T) {
	var d directory
	d.init()
	for i := range 100 {
		d.getOrAdd(fmt.Sprintf("s%d", i), func(*slot) {})
	}
	looked := make(chan struct{})
	giveUp := make(chan struct{})
	var once sync.Once
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		d.sweep(10, func(*slot) bool {
			once.Do(func() {
				go func() {
					d.get("s50")
					d.getOrAdd("new", func(*slot) {})
					close(looked)
				}()
				select {
				case <-looked:
				case <-giveUp:
				}
			})
			return true
		})
	}()
	select {
	case <-looked:
	case <-time.After(10 * time.Second):
		close(giveUp)
		t.Fatal("a lookup waited for the pass")
	}
	<-swept
	require.Equal(t, int64(9), d.n.Load(), "forgotten down to 90%% of the bound")
	require.Len(t, d.ids(), 9)
	require.Equal(t, 9, d.clock.Len())
	require.True(t, d.forgot.Load())
}
