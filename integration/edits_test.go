//go:build !slow

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/edits"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/render"
)

// TestService_Edits plays an agent's turns against a real ctxd, asking
// through the Go client for the context with its old tool results
// cleared: each reply is the edits applied to a build from scratch of the
// session's records up to its seq; a cleared result stays cleared as the
// session grows; and the same request without edits gets, byte for byte,
// the reply it always had.
func TestService_Edits(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	const session = "edits-1"
	cfg := &edits.Config{ToolResults: &edits.ToolResults{TriggerTokens: 6000, HasTrigger: true, Keep: 2, ClearAtLeastTokens: 2000}, Thinking: &edits.Thinking{KeepTurns: 1}}
	var recs []projection.Record
	add := func(s string) {
		v, err := record.DecodeJSON([]byte(s))
		require.NoError(t, err)
		seq := c.publish(session, []byte(s))
		recs = append(recs, projection.Record{Seq: seq, Value: v})
	}
	add(`{"role":"user","content":"find the failing test"}`)
	cleared := map[uint64]bool{}
	for turn := range 30 {
		add(fmt.Sprintf(`{"role":"assistant","content":[{"type":"thinking","thinking":"turn %d","signature":"s"},{"type":"toolCall","id":"c%d","name":"bash","arguments":{"cmd":"go test ./pkg/%d"}}]}`, turn, turn, turn))
		add(fmt.Sprintf(`{"role":"toolResult","toolCallId":"c%d","toolName":"bash","content":[{"type":"text","text":%q}]}`, turn, strings.Repeat(fmt.Sprintf("--- FAIL: TestX%d\n", turn), 60+turn*7)))
		last := recs[len(recs)-1].Seq
		for _, f := range []render.Format{render.Anthropic, render.Neutral} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			data, err := ctxdclient.Context(ctx, c.nc, session, ctxdclient.Request{MinSeq: last, Format: string(f), Edits: cfg})
			cancel()
			require.NoError(t, err)
			v, err := record.DecodeJSON(data)
			require.NoError(t, err)
			got := v.(*record.Map)

			p := projection.New(projection.Options{})
			for _, r := range recs {
				p.Apply(r.Seq, r.Value)
			}
			msgs, seqs, rep := edits.Apply(p.Messages(), cfg, edits.Options{
				Seqs:        p.MessageSeqs(nil),
				Tokens:      func(m []any) int { return render.Tokens(f, m, render.Options{}) },
				ValueTokens: func(v any) int { return render.ValueTokens(f, v) },
			})
			body, _ := render.Render(f, msgs, render.Options{Seqs: seqs})
			for _, m := range body.Fields.Members {
				have, _ := got.Get(m.Key)
				require.Equal(t, string(mustJSON(t, m.Value)), string(mustJSON(t, have)), "turn %d %s: %s", turn, f, m.Key)
			}
			have, _ := got.Get("edits")
			require.Equal(t, string(mustJSON(t, rep.Map())), string(mustJSON(t, have)), "turn %d %s: the report", turn, f)
			if f == render.Anthropic {
				now := map[uint64]bool{}
				for _, cl := range rep.Cleared {
					now[cl.Seq] = true
				}
				for s := range cleared {
					require.True(t, now[s], "turn %d: the result of seq %d came back", turn, s)
				}
				cleared = now
			}
		}
		// Without edits: the reply a request without them always got.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		data, err := ctxdclient.Context(ctx, c.nc, session, ctxdclient.Request{MinSeq: last, Format: "anthropic"})
		cancel()
		require.NoError(t, err)
		requireRendering(t, fmt.Sprintf("turn %d, no edits", turn), session, render.Anthropic, recs, data)
	}
	require.NotEmpty(t, cleared, "the session went over the trigger")

	// A bad request is refused by the service, naming the field.
	msg := c.request("ctxd.context."+session, []byte(`{"edits":{"tool_results":{"keep":-1}}}`), nil)
	require.Equal(t, "400", msg.Header.Get("Nats-Service-Error-Code"))
	require.Contains(t, msg.Header.Get("Nats-Service-Error"), "edits.tool_results.keep must be a non-negative integer")
	// The client refuses tool_results without a trigger before sending.
	_, err := ctxdclient.Context(context.Background(), c.nc, session, ctxdclient.Request{Edits: &edits.Config{ToolResults: &edits.ToolResults{Keep: 1}}})
	require.ErrorIs(t, err, ctxdclient.ErrBadRequest)
}
