package client

import (
	"context"
	"fmt"
	"testing"
	"time"

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
