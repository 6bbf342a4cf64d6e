package server

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// A kept reply holds no more memory than it is counted for, and once the
// session changes its size still sizes the next reply's buffer.
func TestRenderCache_KeepsAndHints(t *testing.T) {
	p := projection.New(projection.Options{})
	p.Apply(1, record.NewMap("role", "user", "content", "hi"))
	req := contextRequest{format: render.Gemini}
	c := renderCache{max: 1 << 20}

	reply, prev := c.get("s", p, req)
	require.Nil(t, reply)
	require.Zero(t, prev)

	buf := make([]byte, 100, 1000)
	c.put("s", p, req, buf)
	reply, prev = c.get("s", p, req)
	require.Equal(t, buf, reply)
	require.Equal(t, 100, cap(reply), "a copy of the reply alone")
	require.Equal(t, 100, prev)
	require.Equal(t, 100, c.bytes)

	p.Apply(2, record.NewMap("role", "user", "content", "more"))
	reply, prev = c.get("s", p, req)
	require.Nil(t, reply)
	require.Equal(t, 100, prev)
	reply, prev = c.get("s", p, contextRequest{format: render.Anthropic})
	require.Nil(t, reply)
	require.Equal(t, 100, prev)
	require.Less(t, 100, sizeHint(prev))
}
