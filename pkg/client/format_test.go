package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/server"
	"github.com/ctxd/ctxd/pkg/store"
)

// Context asks for a format, JSON or msgpack, against the real service.
func TestContext_Format(t *testing.T) {
	url := natstest.Start(t)
	st := store.New()
	st.Apply("s1", 1, []byte(`{"role":"user","content":"hi"}`))
	st.Apply("s1", 2, []byte(`{"role":"assistant","content":"hello"}`))
	svc := server.New(natstest.Connect(t, url), st)
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, asMsgpack := range []bool{false, true} {
		data, err := Context(ctx, nc, "s1", Request{Format: "gemini", BudgetTokens: 1, Msgpack: asMsgpack})
		require.NoError(t, err)
		var v any
		if asMsgpack {
			v, err = record.DecodeMsgpack(data)
		} else {
			v, err = record.DecodeJSON(data)
		}
		require.NoError(t, err)
		m := v.(*record.Map)
		f, _ := m.Get("format")
		require.Equal(t, "gemini", f)
		_, ok := m.Get("contents")
		require.True(t, ok)
		b, _ := m.Get("budget")
		over, _ := b.(*record.Map).Get("over")
		require.Equal(t, true, over)
	}

	_, err := Context(ctx, nc, "s1", Request{Format: "nope"})
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "400", e.Code)
	require.Contains(t, e.Description, "openai-responses")
}
