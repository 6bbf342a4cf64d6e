//go:build !slow

package integration

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/store"
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

// largeLimit runs the test of a context at --max-session-bytes, which
// takes about 4 GiB.
var largeLimit = flag.Bool("large.limit", false, "run TestService_LargeContextAtTheLimit: a session of --max-session-bytes (256 MiB) of records, delivered whole")

// A context of 100 MB, beyond the server's 64 MiB of pending bytes per
// client, reaches ctxd context, pkg/client and a client that fetches the
// chunks, each equal to Build over the session's records.
func TestService_LargeContext(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 100 MB through the embedded server")
	}
	requireLargeContext(t, 100_000_000)
}

// A session holding as many bytes of records as --max-session-bytes
// allows, the largest that is accepted, is delivered whole in each way.
func TestService_LargeContextAtTheLimit(t *testing.T) {
	if !*largeLimit {
		t.Skip("run with -large.limit: 256 MiB of records")
	}
	requireLargeContext(t, store.DefaultMaxSessionBytes)
}

// requireLargeContext publishes a session of exactly size bytes of
// records (screenshots of 6 MB) and reads its context with ctxd context,
// with pkg/client and by fetching its chunks.
func requireLargeContext(t *testing.T, size int) {
	a := startApp(t, t.TempDir())
	c := newClient(t, a.URL())
	rng := rand.New(rand.NewPCG(uint64(size), 7))
	raw := make([]byte, 4_500_000)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	const head, tail = `{"role":"user","content":[{"type":"image","data":"`, `","mimeType":"image/png"}]}`
	var recs []projection.Record
	var last uint64
	start := time.Now()
	for left, i := size, 0; left > 0; i++ {
		raw[0], raw[1], raw[2] = byte(i), byte(i>>8), byte(i>>16)
		data := head + base64.StdEncoding.EncodeToString(raw) + tail
		if left < 2*len(data) {
			if len(data) > left {
				// The last one fills the session to size exactly.
				data = `{"role":"user","content":"` + strings.Repeat("x", left-len(`{"role":"user","content":""}`)) + `"}`
			}
		}
		left -= len(data)
		last = c.publish("large", []byte(data))
		v, err := record.DecodeJSON([]byte(data))
		require.NoError(t, err)
		recs = append(recs, projection.Record{Seq: last, Value: v})
	}
	t.Logf("published %d records, %d bytes, in %v", len(recs), size, time.Since(start))
	want := projection.Build(recs, projection.Options{})
	check := func(how string, data []byte) {
		t.Helper()
		v, err := record.Decoder{MaxBytes: len(data)}.DecodeJSON(data)
		require.NoError(t, err, how)
		seq, _ := v.(*record.Map).Get("seq")
		require.Equal(t, int64(last), seq, how)
		messages, _ := v.(*record.Map).Get("messages")
		got, _ := messages.([]any)
		requireMessages(t, want.Messages, got, how)
	}

	bin := ctxdBinary(t)
	start = time.Now()
	cmd := exec.Command(bin, "context", "large", "--nats", a.URL(), "--min-seq", strconv.FormatUint(last, 10), "--wait-ms", "30000")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "ctxd context: %s", stderr.String())
	t.Logf("ctxd context: %d bytes in %v, peak RSS %d MiB", len(out), time.Since(start), cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss>>10)
	check("ctxd context", out)
	out = nil

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start = time.Now()
	data, err := ctxdclient.Context(ctx, c.nc, "large", ctxdclient.Request{})
	require.NoError(t, err, "pkg/client")
	t.Logf("pkg/client: %d bytes in %v", len(data), time.Since(start))

	check("pkg/client", data)
	data = nil

	// As nats req and a client of protocol 2 do: chunk 0, then the
	// others from the subject it names.
	start = time.Now()
	first := c.request("ctxd.context.large", nil, nil)
	require.Empty(t, first.Header.Get("Nats-Service-Error-Code"), first.Header.Get("Nats-Service-Error"))
	n, err := strconv.Atoi(first.Header.Get("Ctxd-Chunks"))
	require.NoError(t, err)
	whole := append([]byte(nil), first.Data...)
	for k := 1; k < n; k++ {
		m := c.request(first.Header.Get("Ctxd-Chunk-Subject")+"."+strconv.Itoa(k), nil, nil)
		require.Empty(t, m.Header.Get("Nats-Service-Error-Code"), "chunk %d: %s", k, m.Header.Get("Nats-Service-Error"))
		whole = append(whole, m.Data...)
	}
	t.Logf("fetched: %d bytes in %d chunks in %v; test process peak RSS %d MiB", len(whole), n, time.Since(start), procStatus(t, os.Getpid(), "VmHWM")>>20)
	check("fetched", whole)
}
