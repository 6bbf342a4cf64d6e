package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
)

// The README's turn, against a real ctxd on an embedded server: the
// body holds the record just published, rendered for Anthropic.
func TestTurn(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DataDir, cfg.Port = t.TempDir(), -1
	a := app.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Open(ctx))
	defer a.Close()
	nc, err := nats.Connect(a.URL())
	require.NoError(t, err)
	defer nc.Close()

	body, err := turn(ctx, nc, "demo", "anthropic", []byte(`{"role":"user","content":"hello"}`))
	require.NoError(t, err)
	var reply struct {
		Seq      uint64 `json:"seq"`
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(body, &reply))
	require.Equal(t, uint64(1), reply.Seq)
	require.Len(t, reply.Messages, 1)
	require.Equal(t, "user", reply.Messages[0].Role)
	require.Contains(t, string(body), "hello")

	body, err = turn(ctx, nc, "demo", "", []byte(`{"role":"assistant","content":"hi"}`))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(body, &reply))
	require.Equal(t, uint64(2), reply.Seq)
	require.Len(t, reply.Messages, 2)
}
