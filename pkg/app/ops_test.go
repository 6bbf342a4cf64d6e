package app

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

func TestLagError(t *testing.T) {
	for _, tt := range []struct {
		last, applied, max uint64
		ready              bool
	}{
		{0, 0, 0, true},
		{10, 10, 0, true},
		{11, 10, 0, false},
		{1010, 10, 1000, true},
		{1011, 10, 1000, false},
		{5, 10, 0, true}, // applied ahead of a stream info read earlier
	} {
		err := lagError(tt.last, tt.applied, tt.max)
		require.Equal(t, tt.ready, err == nil, "%+v: %v", tt, err)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                  "nats://127.0.0.1:4222",
		"nats://a:secret@h:4222":                 "nats://a:xxxxx@h:4222",
		"nats://tok3n@h:4222,nats://u:p@h2:4222": "nats://xxxxx@h:4222,nats://u:xxxxx@h2:4222",
		"tls://user:pa%40ss@example.com:4222":    "tls://user:xxxxx@example.com:4222",
		// Without a scheme, as nats.go takes them too.
		"ctxd:s3cret@127.0.0.1:4222":             "ctxd:xxxxx@127.0.0.1:4222",
		"nats://a:1@h1:4222,ctxd:s3cret@h2:4222": "nats://a:xxxxx@h1:4222,ctxd:xxxxx@h2:4222",
		"tok3n@h:4222":                           "xxxxx@h:4222",
		// One that does not parse, and an "@" in the password.
		"nats://ctxd:s3/cret@127.0.0.1:4222": "nats://ctxd:xxxxx@127.0.0.1:4222",
		"nats://ctxd:p@ss@127.0.0.1:4222":    "nats://ctxd:xxxxx@127.0.0.1:4222",
		"127.0.0.1:4222":                     "127.0.0.1:4222",
	} {
		require.Equal(t, want, Redact(in), in)
	}
}

// An error that quotes a URL with credentials (nats.go's, for a URL it
// cannot parse) shows them replaced, and still is what it wraps.
func TestRedactError(t *testing.T) {
	const url = "nats://ctxd:s3/cret@127.0.0.1:1"
	_, err := nats.Connect(url)
	require.Error(t, err)
	require.Contains(t, err.Error(), "s3/cret", "nats.go quotes it")
	red := RedactError(url, err)
	require.NotContains(t, red.Error(), "s3")
	require.Contains(t, red.Error(), "ctxd:xxxxx@127.0.0.1:1")
	require.ErrorIs(t, red, err)
	plain := errors.New("no servers available")
	require.Same(t, plain, RedactError(url, plain))
}
