package integration

import (
	"context"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/record"
)

func screenshot(t testing.TB, rawBytes int, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	raw := make([]byte, rawBytes)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	return base64.StdEncoding.EncodeToString(raw)
}

// A 5 MiB screenshot comes back intact; a reply larger than the max
// payload reaches the client whole, in chunks; a record over the hard
// limit is refused at publish time.
func TestService_LargeScreenshots(t *testing.T) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	shot := screenshot(t, 5<<20, 1)
	upload := screenshot(t, 5<<20, 2)

	c.publishValue("big", record.NewMap("role", "assistant", "content", []any{
		record.NewMap("type", "toolCall", "id", "b1", "name", "browser_use", "arguments", record.NewMap()),
	}), false)
	seq := c.publishValue("big", record.NewMap("role", "toolResult", "toolCallId", "b1", "content", []any{
		record.NewMap("type", "text", "text", "page"),
		record.NewMap("type", "image", "data", shot, "mimeType", "image/png"),
	}), false)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data, err := ctxdclient.Context(ctx, c.nc, "big", ctxdclient.Request{MinSeq: seq, WaitMS: 10000})
	require.NoError(t, err)
	r := decodeReply(t, data)
	require.Len(t, r.Messages, 2)
	content, _ := r.Messages[1].(*record.Map).Get("content")
	img := content.([]any)[1].(*record.Map)
	got, _ := img.String("data")
	require.Equal(t, shot, got, "the screenshot came back changed")

	// A user's upload of the same size makes the reply larger than the
	// max payload: it arrives in chunks, whole, in both formats.
	seq = c.publishValue("big", record.NewMap("role", "user", "content", []any{
		record.NewMap("type", "image", "data", upload, "mimeType", "image/png"),
	}), true)
	for _, asMsgpack := range []bool{false, true} {
		data, err = ctxdclient.Context(ctx, c.nc, "big", ctxdclient.Request{MinSeq: seq, WaitMS: 10000, Msgpack: asMsgpack})
		require.NoError(t, err)
		require.Greater(t, int64(len(data)), c.nc.MaxPayload())
		r = decodeReply(t, data)
		require.Equal(t, seq, r.Seq)
		require.Len(t, r.Messages, 3)
		content, _ = r.Messages[2].(*record.Map).Get("content")
		got, _ = content.([]any)[0].(*record.Map).String("data")
		require.Equal(t, upload, got)
	}
	// The plain reply says how to fetch the rest.
	msg := c.request("ctxd.context.big", nil, nil)
	require.Equal(t, "2", msg.Header.Get("Ctxd-Chunks"))
	require.NotEmpty(t, msg.Header.Get("Ctxd-Chunk-Subject"))

	// Over the hard limit: refused at publish, nothing stored.
	huge := `{"role":"user","content":"` + strings.Repeat("x", 9<<20) + `"}`
	_, err = c.js.Publish(ctx, "transcripts.big", []byte(huge))
	require.Error(t, err)
	require.True(t, errors.Is(err, nats.ErrMaxPayload), "%v", err)

	cmd := exec.Command(ctxdBinary(t), "publish", "--nats", a.URL(), "--session", "big", "-")
	cmd.Stdin = strings.NewReader(huge + "\n")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "record 1 is")
	require.Contains(t, string(out), "max_payload")

	// The CLI reassembles the chunks too.
	out, err = exec.Command(ctxdBinary(t), "context", "big", "--nats", a.URL()).Output()
	require.NoError(t, err)
	require.Len(t, decodeReply(t, out).Messages, 3)
}
