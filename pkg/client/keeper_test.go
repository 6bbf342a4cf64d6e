package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/server"
	"github.com/ctxd/ctxd/pkg/store"
)

// A Keeper returns whole replies, byte for byte those asked for without
// a base, while the service sends it deltas; Off asks for whole ones.
func TestKeeper_Context(t *testing.T) {
	url := natstest.Start(t)
	st := store.New()
	svc := server.New(natstest.Connect(t, url), st)
	require.NoError(t, svc.Open())
	t.Cleanup(func() { svc.Close() })
	nc := natstest.Connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, asMsgpack := range []bool{false, true} {
		for _, format := range []string{"", "anthropic", "gemini"} {
			var k, off Keeper
			off.Off = true
			session := fmt.Sprintf("k%v%s", asMsgpack, format)
			deltas := 0
			for i := range 30 {
				seq := uint64(i + 1)
				st.Apply(session, seq, fmt.Appendf(nil, `{"role":"user","content":"turn %d"}`, i))
				req := Request{MinSeq: seq, Format: format, Msgpack: asMsgpack}
				got, err := k.Context(ctx, nc, session, req)
				require.NoError(t, err)
				want, err := Context(ctx, nc, session, req)
				require.NoError(t, err)
				require.Equal(t, string(want), string(got), "turn %d", i)
				whole, err := off.Context(ctx, nc, session, Request{MinSeq: seq, Format: format, Msgpack: asMsgpack})
				require.NoError(t, err)
				require.Equal(t, string(want), string(whole), "off: the whole reply, as a plain request gets it")
				r, err := protocol.ReadReply(whole)
				require.NoError(t, err)
				require.Len(t, r.Digest, protocol.DigestLen, "a whole reply carries its digest")
				bare, err := off.Context(ctx, nc, session, Request{MinSeq: seq, Format: format, Msgpack: asMsgpack, NoDigest: true})
				require.NoError(t, err)
				r, err = protocol.ReadReply(bare)
				require.NoError(t, err)
				require.Empty(t, r.Digest, "no_digest: a reply of protocol 3.4")
				// The raw reply against the one before is a delta.
				prev := k.held[keptKey{session, format, asMsgpack}]
				raw, err := Context(ctx, nc, session, Request{Format: format, Msgpack: asMsgpack, HaveSeq: prev.Reply.Seq, HaveDigest: prev.Reply.Digest})
				require.NoError(t, err)
				if r, _ := protocol.ReadReply(raw); r.HasDelta {
					deltas++
				}
			}
			require.Greater(t, deltas, 25, session)
		}
	}
}

// A Keeper asks for the digest in so many words: a service before
// protocol 3.5 adds it only when asked, and a reply without it is one
// the Keeper cannot ask the next turn against.
func TestKeeper_AsksForTheDigest(t *testing.T) {
	url := natstest.Start(t)
	nc := natstest.Connect(t, url)
	bodies := make(chan []byte, 4)
	sub, err := nc.Subscribe("ctxd.context.old", func(m *nats.Msg) {
		bodies <- m.Data
		// A service of 3.4: the reply carries its digest only when asked.
		reply := `{"session":"old","seq":1,"messages":[],"dropped":{"unpaired_calls":[],"orphan_results":[],"images_omitted":0}}`
		if r, err := protocol.ParseRequest(m.Data); err == nil && r.AskDigest {
			reply = reply[:len(reply)-1] + `,"digest":"66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"}`
		}
		m.Respond([]byte(reply))
	})
	require.NoError(t, err)
	t.Cleanup(func() { sub.Unsubscribe() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var k Keeper
	got, err := k.Context(ctx, nc, "old", Request{})
	require.NoError(t, err)
	r, err := protocol.ParseRequest(<-bodies)
	require.NoError(t, err)
	require.True(t, r.AskDigest, "the first request asks for the digest")
	h, err := protocol.ReadReply(got)
	require.NoError(t, err)
	require.Len(t, h.Digest, protocol.DigestLen)
	_, err = k.Context(ctx, nc, "old", Request{})
	require.NoError(t, err)
	r, err = protocol.ParseRequest(<-bodies)
	require.NoError(t, err)
	require.True(t, r.HasHave, "the next asks against the reply held")

	// A plain request does not say: a service of 3.5 adds the digest.
	_, err = Context(ctx, nc, "old", Request{})
	require.NoError(t, err)
	r, err = protocol.ParseRequest(<-bodies)
	require.NoError(t, err)
	require.False(t, r.AskDigest || r.NoDigest)
}
