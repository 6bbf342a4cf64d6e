package render

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProviders: every format has a provider that names it, every
// provider is a format, and only Neutral is not laid out.
func TestProviders(t *testing.T) {
	require.Len(t, providers, len(Formats))
	for _, f := range Formats {
		pv := providers[f]
		require.NotNil(t, pv, f)
		require.Equal(t, f, pv.format)
		require.Equal(t, f == Neutral, pv.out == nil, f)
		require.NotEmpty(t, pv.messages, f)
		require.NotNil(t, pv.imageTokens, f)
		require.Positive(t, pv.idMax, f)
		if pv.breakpoint {
			require.NotEmpty(t, pv.blocks, "%s: a cache breakpoint names a block of a body message", f)
		}
	}
	require.Panics(t, func() { providerOf("nonesuch") })
}
