package render

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// isBase64 agrees with the standard library's decoder (which ignores
// line breaks: isBase64 does not) on every byte value in every position
// of a word and of the tail.
func TestIsBase64(t *testing.T) {
	ref := func(s string) bool {
		_, err := base64.StdEncoding.DecodeString(s)
		return err == nil && !strings.ContainsAny(s, "\r\n")
	}
	base := "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
	require.True(t, isBase64(base))
	for pos := 0; pos < len(base); pos++ {
		for c := 0; c < 256; c++ {
			b := []byte(base)
			b[pos] = byte(c)
			s := string(b)
			require.Equal(t, ref(s), isBase64(s), "byte %#x at %d: %q", c, pos, s)
		}
	}
	for _, s := range []string{"", "QQ==", "QUI=", "QUJD", "Q===", "Q", "QQ=", "=QQQ", "QQ==QQ==", "aGk+/w==", "aGk+/w\n=="} {
		require.Equal(t, ref(s), isBase64(s), "%q", s)
	}
}

func BenchmarkIsBase64(b *testing.B) {
	s := base64.StdEncoding.EncodeToString(make([]byte, 200<<10))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if !isBase64(s) {
			b.Fatal()
		}
	}
}
