//go:build slow

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/record"
)

// TestOperator_PurgeDuringTurns: turns (a record published, then the
// context asked with min_seq its PubAck's) on two instances, the one
// with the ingest pin and one that answers from its follower, while the
// operator purges the session's subject between two turns, round after
// round. No advisory tells ctxd (its user may not subscribe to them):
// only the proof that no removal was missed before a record is shown
// keeps the record after the purge from being shown beside those the
// purge took. Every reply equals Build of what the stream holds of the
// session.
func TestOperator_PurgeDuringTurns(t *testing.T) {
	url := untoldServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nc, err := nats.Connect(url, nats.UserInfo("op", "op-pw"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	c := &client{t: t, nc: nc, js: js}
	for i := range 2 {
		startApp(t, t.TempDir(), func(c *app.Config) {
			c.NATSURL = url
			c.Instance = fmt.Sprintf("i%d", i)
			c.NATSOptions = []nats.Option{nats.UserInfo("ctxd", "ctxd-pw")}
		})
	}
	st, err := js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	for round := range 4 {
		for i := range 24 {
			v := record.NewMap("role", []string{"user", "assistant"}[i%2], "content", fmt.Sprintf("round %d turn %d", round, i))
			seq := c.publishValue("t1", v, false)
			c.fetchChecked("t1", fmt.Sprintf("round %d turn %d", round, i), seq)
		}
		require.NoError(t, st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.t1")))
	}
}
