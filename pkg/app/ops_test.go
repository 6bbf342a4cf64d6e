package app

import (
	"testing"

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
	} {
		require.Equal(t, want, Redact(in), in)
	}
}
