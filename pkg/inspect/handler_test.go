package inspect_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/inspect"
	"github.com/ctxd/ctxd/pkg/record"
)

// instance is a running ctxd with the inspector mounted under /ui/.
type instance struct {
	t   testing.TB
	app *app.App
	js  jetstream.JetStream
	srv *httptest.Server
	ui  *inspect.Handler
}

func startInstance(t testing.TB, opt inspect.Options) *instance {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Port = -1
	a := app.New(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.Open(ctx))
	t.Cleanup(func() { a.Close() })
	opt.Config = a.InspectConfig()
	opt.Poll = 20 * time.Millisecond
	ui := inspect.New(a.InspectSource(), opt)
	in := &instance{t: t, app: a, ui: ui}
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.RegisterOnShutdown(func() { ui.Close() })
	srv.Start()
	t.Cleanup(func() { ui.Close(); srv.Close() })
	js, err := jetstream.New(natstest.Connect(t, a.URL()))
	require.NoError(t, err)
	in.js, in.srv = js, srv
	return in
}

// publish stores records on a subject and waits until ctxd applied them.
func (in *instance) publish(subj string, records ...any) uint64 {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var last uint64
	for _, r := range records {
		var data []byte
		switch x := r.(type) {
		case []byte:
			data = x
		case string:
			data = []byte(x)
		default:
			var err error
			data, err = record.MarshalJSON(r)
			require.NoError(in.t, err)
		}
		ack, err := in.js.Publish(ctx, subj, data)
		require.NoError(in.t, err)
		last = ack.Sequence
	}
	require.NoError(in.t, in.app.Wait(ctx, last, 10*time.Second)) // the ingest, whichever store it feeds
	return last
}

// get fetches a path and returns the status, content type and body.
func (in *instance) get(path string) (int, string, string) {
	in.t.Helper()
	resp, err := http.Get(in.srv.URL + path)
	require.NoError(in.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(in.t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

func m(kv ...any) *record.Map { return record.NewMap(kv...) }

// noisePNG is an incompressible PNG of about side*side*4 bytes.
func noisePNG(t testing.TB, side int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, side, side))
	r := rand.New(rand.NewPCG(1, 2))
	for i := range img.Pix {
		img.Pix[i] = byte(r.Uint32())
	}
	img.Pix[3] = 255
	var b bytes.Buffer
	require.NoError(t, (&png.Encoder{CompressionLevel: png.NoCompression}).Encode(&b, img))
	return b.Bytes()
}

func smallPNG(t testing.TB) string {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, 4, 4))
	for i := range 16 {
		img.Set(i%4, i/4, color.NRGBA{200, 10, 10, 255})
	}
	var b bytes.Buffer
	require.NoError(t, png.Encode(&b, img))
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// demoSession is a session with a record of every fate, hostile content
// included; it returns the sequence of the big screenshot.
func demoSession(t testing.TB, in *instance, id string) (bigSeq uint64) {
	t.Helper()
	subj := "transcripts." + id
	img := func(data string) *record.Map { return m("type", "image", "data", data, "mimeType", "image/png") }
	small := smallPNG(t)
	big := base64.StdEncoding.EncodeToString(noisePNG(t, 1150)) // about 5 MiB, 7 MiB as base64
	in.publish(subj,
		m("role", "user", "content", `<script>alert("x")</script><img src=x onerror=alert(1)>`),
		m("role", "assistant", "content", []any{m("type", "text", "text", strings.Repeat("long ", 40_000)),
			m("type", "toolCall", "id", "b1", "name", "browser_use")}),
	)
	bigSeq = in.publish(subj, m("role", "toolResult", "toolCallId", "b1", "content", []any{img(big)}))
	in.publish(subj,
		m("role", "assistant", "content", []any{m("type", "toolCall", "id", "b2", "name", "browser_use")}),
		m("role", "toolResult", "toolCallId", "b2", "content", []any{img(small)}),
		m("role", "assistant", "content", []any{m("type", "toolCall", "id", "c9", "name", "bash")}),
		m("role", "toolResult", "toolCallId", "zz", "content", "orphan"),
		m("role", "bashExecution", "command", "pwd", "output", "/repo\n", "exitCode", int64(0)),
		m("kind", "context", "role", "user", "content", "hidden"),
	)
	return bigSeq
}

func TestHandler_Session(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	bigSeq := demoSession(t, in, "demo-1")

	code, ctype, body := in.get("/ui/sessions/demo-1")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "text/html; charset=utf-8", ctype)
	for _, st := range []string{"kept", "trimmed", "dropped", "converted"} {
		require.Contains(t, body, `data-status="`+st+`"`)
	}
	require.Contains(t, body, `unpaired call <code>c9</code> (bash) at <a href="#seq-6">`)
	require.Contains(t, body, `orphan result <code>zz</code> at <a href="#seq-7">`)
	require.Contains(t, body, `href="#seq-7"`)
	// Hostile content is escaped, never markup.
	require.NotContains(t, body, "<script>alert")
	require.NotContains(t, body, "<img src=x")
	require.Contains(t, body, "&lt;script&gt;")
	// A 5 MiB screenshot and a 200 KB string keep the page small: cut
	// previews, and a lazy thumbnail by URL, greyed since it was trimmed.
	require.Less(t, len(body), 100_000, "page size")
	t.Logf("session page: %d bytes, with a %d-byte screenshot record", len(body), bigSeqSize(t, in, bigSeq))
	thumb := fmt.Sprintf(`src="/ui/sessions/demo-1/images/%d/0"`, bigSeq)
	require.Contains(t, body, thumb)
	require.Regexp(t, `<img class="thumb omitted" loading="lazy"[^>]*`+thumb, body)
	require.Regexp(t, `<img class="thumb" loading="lazy"[^>]*src="/ui/sessions/demo-1/images/5/0"`, body)

	code, ctype, png := in.get(fmt.Sprintf("/ui/sessions/demo-1/images/%d/0", bigSeq))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "image/png", ctype)
	require.Less(t, len(png), 300_000)
	t.Logf("thumbnail of the screenshot: %d bytes", len(png))
	cfg, _, err := image.DecodeConfig(strings.NewReader(png))
	require.NoError(t, err)
	require.LessOrEqual(t, max(cfg.Width, cfg.Height), 240)

	// The raw record, as text that never runs.
	code, ctype, raw := in.get("/ui/sessions/demo-1/records/1")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/plain; charset=utf-8", ctype)
	require.Contains(t, raw, `<script>alert(\"x\")</script>`)

	// As at seq 2: the screenshot is not there yet, c9 not yet called.
	code, _, body = in.get("/ui/sessions/demo-1?at=2")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "c9")
	require.Contains(t, body, "As it was at seq 2")
	require.Equal(t, 2, strings.Count(body, `class="rec `))

	code, ctype, js := in.get("/ui/sessions/demo-1?at=2&format=json")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "application/json", ctype)
	var got struct {
		Seq      uint64            `json:"seq"`
		Records  []json.RawMessage `json:"records"`
		Messages []json.RawMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &got))
	require.Equal(t, uint64(2), got.Seq)
	require.Equal(t, 2, len(got.Records))
	require.Equal(t, 2, len(got.Messages))
	require.Contains(t, string(got.Records[1]), `"status":"pruned"`, "the call b1 is not answered by seq 2")

	code, _, _ = in.get("/ui/sessions/demo-1?at=x")
	require.Equal(t, http.StatusBadRequest, code)
}

func TestHandler_HostileIDs(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	demoSession(t, in, "a")
	in.publish("transcripts.other", m("role", "user", "content", "other's"))
	for _, p := range []string{
		"/ui/sessions/a.b", "/ui/sessions/%3Cscript%3Ealert(1)%3C%2Fscript%3E", "/ui/sessions/a%2Fb",
		"/ui/sessions/" + strings.Repeat("x", 129), "/ui/sessions/nosuch", "/ui/sessions/*", "/ui/sessions/%3E",
		"/ui/sessions/other/records/1",  // a record of another session
		"/ui/sessions/a/records/999999", // no record
		"/ui/sessions/a/records/-1",     // not a sequence
		"/ui/sessions/a/images/1/0",     // a record without images
		"/ui/sessions/a/images/3/x",     // not an image number
		"/ui/rejected/1",                // not rejected
	} {
		code, ctype, body := in.get(p)
		require.Equal(t, http.StatusNotFound, code, p)
		require.Equal(t, "text/html; charset=utf-8", ctype, p)
		require.NotContains(t, body, "<script>alert", p)
	}
}

func TestHandler_SessionsAndRejected(t *testing.T) {
	in := startInstance(t, inspect.Options{
		Authorize: func(r *http.Request, session string) bool { return session != "secret" },
	})
	demoSession(t, in, "first")
	in.publish("transcripts.secret", m("role", "user", "content", "not for you"))
	in.publish("transcripts.second", m("role", "user", "content", "hi"), "{not json", `[1,2]`)
	bad := in.publish("transcripts.bad.subject", m("role", "user", "content", "<b>misaddressed</b>"))

	code, _, body := in.get("/ui/")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "secret")
	require.NotContains(t, body, "bad.subject", "a subject that is no session is not listed")
	first, second := strings.Index(body, `data-session="first"`), strings.Index(body, `data-session="second"`)
	require.True(t, first > 0 && second > 0 && second < first, "recently active first")
	code, _, body = in.get("/ui/?q=FIR")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-session="first"`)
	require.NotContains(t, body, `data-session="second"`)

	code, _, _ = in.get("/ui/sessions/secret")
	require.Equal(t, http.StatusNotFound, code, "refused as if it did not exist")

	code, _, body = in.get("/ui/rejected")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, fmt.Sprintf(`href="/ui/rejected/%d"`, bad))
	require.Contains(t, body, "transcripts.bad.subject")
	require.Contains(t, body, "not a map")
	require.Contains(t, body, `href="/ui/sessions/second#seq-`)
	code, ctype, raw := in.get(fmt.Sprintf("/ui/rejected/%d", bad))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/plain; charset=utf-8", ctype)
	require.Contains(t, raw, "<b>misaddressed</b>")

	// The session page lists the rejected records in place.
	code, _, body = in.get("/ui/sessions/second")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 2, strings.Count(body, `class="rec st-rejected"`), "in the records")
	require.Equal(t, 2, strings.Count(body, `class="conv-item removed st-rejected"`), "in the conversation")
}

func TestHandler_Events(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	in.publish("transcripts.live", m("role", "user", "content", "one"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", in.srv.URL+"/ui/sessions/live/events", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
		close(events)
	}()
	require.Equal(t, "1", <-events)
	seq := in.publish("transcripts.live", m("role", "user", "content", "two"))
	require.Equal(t, fmt.Sprint(seq), <-events)
	// Close ends the stream, so that a server's Shutdown is not held.
	in.ui.Close()
	for range events {
	}
}

func TestHandler_AtBeyondTheStream(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	in.publish("transcripts.s", m("role", "user", "content", "one"))
	for _, at := range []string{"2", "18446744073709551615"} {
		code, _, body := in.get("/ui/sessions/s?at=" + at)
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, 1, strings.Count(body, `class="rec `), at)
	}
	code, _, _ := in.get("/ui/sessions/s?at=18446744073709551616")
	require.Equal(t, http.StatusBadRequest, code)
}

func TestHandler_AuthorizeEverywhere(t *testing.T) {
	in := startInstance(t, inspect.Options{
		Authorize: func(r *http.Request, session string) bool { return session != "secret" && session != "" },
	})
	small := smallPNG(t)
	in.publish("transcripts.secret",
		m("role", "assistant", "content", []any{m("type", "toolCall", "id", "b1", "name", "browser_use")}),
		m("role", "toolResult", "toolCallId", "b1", "content", []any{m("type", "image", "data", small, "mimeType", "image/png")}),
		"{undecodable")
	nosession := in.publish("transcripts.a.b", m("role", "user", "content", "x"))
	for _, p := range []string{
		"/ui/sessions/secret", "/ui/sessions/secret?at=1", "/ui/sessions/secret/events",
		"/ui/sessions/secret/records/1", "/ui/sessions/secret/images/2/0",
		"/ui/rejected/3", fmt.Sprintf("/ui/rejected/%d", nosession),
	} {
		code, _, _ := in.get(p)
		require.Equal(t, http.StatusNotFound, code, p)
	}
	code, _, body := in.get("/ui/rejected")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "secret")
	require.NotContains(t, body, "transcripts.a.b")
	code, _, body = in.get("/ui/")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "secret")
}

func TestHandler_LongSession(t *testing.T) {
	in := startInstance(t, inspect.Options{PageRecords: 10})
	recs := []any{m("role", "assistant", "content", []any{m("type", "toolCall", "id", "early", "name", "bash")})}
	for i := range 29 {
		recs = append(recs, m("role", "user", "content", fmt.Sprintf("message %d", i)))
	}
	in.publish("transcripts.long", recs...)
	code, _, body := in.get("/ui/sessions/long")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 10, strings.Count(body, `class="rec `))
	require.Contains(t, body, `id="seq-21"`)
	require.Contains(t, body, `id="seq-30"`)
	require.Contains(t, body, `20 earlier record(s) on <a href="/ui/sessions/long?page=1">older pages</a>`)
	require.Contains(t, body, `<a href="/ui/sessions/long?page=2#seq-1">seq 1</a>`, "a dropped record not shown links to its page")
	require.Contains(t, body, "context 29 messages", "the context is built from every record")
	code, _, body = in.get("/ui/sessions/long?page=2")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 10, strings.Count(body, `class="rec `))
	require.Contains(t, body, `id="seq-1"`)
	require.Contains(t, body, `<a href="#seq-1">seq 1</a>`)
	require.Contains(t, body, `href="/ui/sessions/long?page=1">newer</a>`)
	code, _, body = in.get("/ui/sessions/long?at=20&page=1")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 10, strings.Count(body, `class="rec `))
	require.Contains(t, body, `id="seq-1"`)
	require.Contains(t, body, `href="/ui/sessions/long?at=20">newer</a>`)
	for _, p := range []string{"?page=3", "?page=-1", "?page=x", "?page=99999999999999999999", "?all=1&page=1e3"} {
		code, _, body = in.get("/ui/sessions/long" + p)
		require.Equal(t, http.StatusBadRequest, code, p)
		require.Contains(t, body, "page", p)
	}
}

// TestHandler_PageBounded: a page holds a bounded number of records and
// bytes, whatever the session holds: large values are cut, with a link
// to the raw record, and a record that gives many messages shows a few.
func TestHandler_PageBounded(t *testing.T) {
	in := startInstance(t, inspect.Options{PageRecords: 5})
	var many []any
	for i := range 500 {
		many = append(many, m("role", "user", "content", fmt.Sprintf("summary message %d %s", i, strings.Repeat("x", 2000))))
	}
	huge := strings.Repeat("y", 2<<20)
	in.publish("transcripts.big",
		m("type", "compaction", "at", "2026-01-02T03:04:05Z", "baseSeq", int64(1), "plannerVersion", int64(1),
			"summaryModelRef", "m", "summary", "s", "qualityAudit", "passed", "messages", many,
			"firstKeptIndex", int64(0), "tokensBefore", int64(10), "tokensAfter", int64(5)),
		m("role", "user", "content", huge),
		m("role", "assistant", "content", []any{m("type", "text", "text", huge[:1<<20]), m("type", "text", "text", huge[:1<<20])}),
	)
	code, _, body := in.get("/ui/sessions/big")
	require.Equal(t, http.StatusOK, code)
	require.Less(t, len(body), 256<<10, "a page of 3 records of 2 MiB or 500 messages")
	require.Contains(t, body, `[19] user`)
	require.NotContains(t, body, `[20] user`)
	require.Contains(t, body, `480 more message(s)`)
	require.Contains(t, body, `href="/ui/sessions/big/records/2"`, "the raw record is a link away")
	require.Contains(t, body, "context 502 messages")
	// The conversation shows the latest entries within its share.
	require.Regexp(t, `<p class="conv-hidden">\d+ earlier entries not shown`, body)
	require.Contains(t, body, `id="msg-501"`)
	require.NotContains(t, body, `id="msg-0"`)
	t.Logf("page of a 502-message context: %d bytes", len(body))
}

// TestHandler_PageOfSessions: the list's page is a number in range, or 400.
func TestHandler_PageOfSessions(t *testing.T) {
	in := startInstance(t, inspect.Options{PageSessions: 2})
	for _, id := range []string{"a", "b", "c"} {
		in.publish("transcripts."+id, m("role", "user", "content", "hi"))
	}
	code, _, body := in.get("/ui/?page=1")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 1, strings.Count(body, `data-session=`))
	for _, p := range []string{"99999999999999999999", "9223372036854775807", "-1", "x", "2", "1.5"} {
		code, _, body := in.get("/ui/?page=" + p)
		require.Equal(t, http.StatusBadRequest, code, p)
		require.Contains(t, body, "page", p)
	}
}

// TestHandler_Follow: following a session fetches the records after the
// one the page shows last, and the fates of those it shows, not the page.
func TestHandler_Follow(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	in.publish("transcripts.f",
		m("role", "assistant", "content", []any{m("type", "toolCall", "id", "c1", "name", "bash")}),
		m("role", "user", "content", "two"))
	seq := in.publish("transcripts.f",
		m("role", "toolResult", "toolCallId", "c1", "content", "done"),
		m("role", "user", "content", "four"))
	code, ctype, body := in.get("/ui/sessions/f?after=2&from=1")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "text/html; charset=utf-8", ctype)
	require.NotContains(t, body, "<html", "a fragment, not a page")
	require.Equal(t, 2, strings.Count(body, `class="rec `))
	require.Contains(t, body, `id="seq-3"`)
	require.Contains(t, body, fmt.Sprintf(`id="seq-%d"`, seq))
	require.NotContains(t, body, `id="seq-2"`)
	require.Contains(t, body, fmt.Sprintf(`data-seq="%d"`, seq))
	require.Regexp(t, `<li data-seq="1" data-status="kept"`, body, "the call is paired now")
	code, _, body = in.get(fmt.Sprintf("/ui/sessions/f?after=%d&from=1", seq))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 0, strings.Count(body, `class="rec `))
	for _, p := range []string{"?after=x", "?after=-1&from=1", "?after=2&from=y"} {
		code, _, _ = in.get("/ui/sessions/f" + p)
		require.Equal(t, http.StatusBadRequest, code, p)
	}
}

// blocking is a Source whose reads of a session wait until release is
// closed, and are counted; listing says when a view lists a session.
type blocking struct {
	inspect.Source
	reads   atomic.Int64
	listing chan struct{}
	reading chan struct{}
	release chan struct{}
}

func (b *blocking) Sizes(ctx context.Context, session string, from, to uint64, fn func(uint64, int) error) error {
	err := b.Source.Sizes(ctx, session, from, to, fn)
	b.listing <- struct{}{}
	return err
}

func (b *blocking) Records(ctx context.Context, session string, to uint64, fn func(uint64, []byte) error) error {
	b.reads.Add(1)
	b.reading <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.Source.Records(ctx, session, to, fn)
}

// TestHandler_LoadsBounded: past MaxLoads views loading at once, a view
// that would load too is refused with 503 at once; of those loading, one
// reads records at a time; views of the latest page being read wait for
// that read, and the page read is shared until the service applies a
// record.
func TestHandler_LoadsBounded(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	in.publish("transcripts.s", m("role", "user", "content", "one"))
	src := &blocking{Source: in.app.InspectSource(), listing: make(chan struct{}, 16), reading: make(chan struct{}, 8), release: make(chan struct{})}
	ui := inspect.New(src, inspect.Options{Config: in.app.InspectConfig(), MaxLoads: 2})
	srv := httptest.NewServer(ui)
	t.Cleanup(func() { ui.Close(); srv.Close() })
	get := func(path string) (int, string, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(body)
	}
	done := make(chan int, 3)
	for _, p := range []string{"/ui/sessions/s", "/ui/sessions/s?format=json"} {
		go func() { code, _, _ := get(p); done <- code }()
	}
	<-src.listing
	<-src.listing // both views hold a slot
	<-src.reading
	require.Never(t, func() bool { return len(src.reading) > 0 }, 100*time.Millisecond, 10*time.Millisecond, "one view reads at a time")
	for _, p := range []string{"/ui/sessions/s?at=1", "/ui/sessions/s?format=json", "/ui/sessions/s?after=0&at=1", "/ui/"} {
		code, retry, body := get(p)
		require.Equal(t, http.StatusServiceUnavailable, code, p)
		require.NotEmpty(t, retry, p)
		require.Contains(t, body, "views", p)
	}
	go func() { code, _, _ := get("/ui/sessions/s?after=0"); done <- code }() // waits for the read in progress
	close(src.release)
	for range 3 {
		require.Equal(t, http.StatusOK, <-done)
	}
	require.Equal(t, int64(2), src.reads.Load())
	code, _, _ := get("/ui/sessions/s")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, int64(2), src.reads.Load(), "the latest page is held while nothing is applied")
	code, _, _ = get("/ui/sessions/s?at=1")
	require.Equal(t, http.StatusOK, code, "a slot is free again")
	require.Equal(t, int64(3), src.reads.Load())
	in.publish("transcripts.s", m("role", "user", "content", "two"))
	code, _, body := get("/ui/sessions/s")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="seq-2"`, "a record applied: the page is read again")
	require.Equal(t, int64(4), src.reads.Load())
}

func TestHandler_Compaction(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	compaction := func(text string) *record.Map {
		return m("type", "compaction", "at", "2026-01-02T03:04:05Z", "baseSeq", int64(1), "plannerVersion", int64(1),
			"summaryModelRef", "m", "summary", "s", "qualityAudit", "passed",
			"messages", []any{m("role", "user", "content", text)},
			"firstKeptIndex", int64(0), "tokensBefore", int64(10), "tokensAfter", int64(5))
	}
	in.publish("transcripts.c",
		m("role", "user", "content", "before"),                  // 1 replaced
		compaction("first snapshot"),                            // 2 replaced by 4
		m("type", "compaction", "summary", "invalid"),           // 3 dropped, resets nothing
		compaction("second snapshot"),                           // 4 checkpoint
		m("role", "assistant", "content", "after the snapshot"), // 5 kept
	)
	code, _, body := in.get("/ui/sessions/c")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 2, strings.Count(body, `<tr class="divider">`), "a divider per valid compaction")
	require.Contains(t, body, `compaction checkpoint at seq 4 (checkpoint)`)
	require.Regexp(t, `id="seq-1" class="rec st-replaced"`, body)
	require.Regexp(t, `id="seq-2" class="rec st-replaced"`, body)
	require.Regexp(t, `id="seq-3" class="rec st-dropped"`, body)
	require.Regexp(t, `id="seq-4" class="rec st-checkpoint"`, body)
	require.Contains(t, body, "replaced by the compaction at seq 4")
	require.Contains(t, body, "context 2 messages")
	require.NotContains(t, body, `[0] user</span><pre class="preview">{&#34;role&#34;:&#34;user&#34;,&#34;content&#34;:&#34;before`)
}

// bigSeqSize returns the size of the record stored at seq.
func bigSeqSize(t testing.TB, in *instance, seq uint64) int {
	t.Helper()
	_, _, raw := in.get(fmt.Sprintf("/ui/sessions/demo-1/records/%d", seq))
	return len(raw)
}

// counting is a Source that counts the lookups of a session's last
// record.
type counting struct {
	inspect.Source
	lookups atomic.Int64
}

func (c *counting) Last(ctx context.Context, session string) (uint64, error) {
	c.lookups.Add(1)
	return c.Source.Last(ctx, session)
}

func (c *counting) Sizes(ctx context.Context, session string, from, to uint64, fn func(uint64, int) error) error {
	c.lookups.Add(1)
	return c.Source.Sizes(ctx, session, from, to, fn)
}

// TestHandler_EventsShareLookups: the pages following a session look
// for its last record once per record applied between them, not once
// each.
func TestHandler_EventsShareLookups(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	in.publish("transcripts.live", m("role", "user", "content", "one"))
	src := &counting{Source: in.app.InspectSource()}
	ui := inspect.New(src, inspect.Options{Config: in.app.InspectConfig(), Poll: 10 * time.Millisecond})
	srv := httptest.NewServer(ui)
	t.Cleanup(func() { ui.Close(); srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const viewers = 4
	events := make(chan string, 64)
	for range viewers {
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/ui/sessions/live/events", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		go func() {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					events <- d
				}
			}
		}()
	}
	for range viewers {
		require.Equal(t, "1", <-events)
	}
	seq := in.publish("transcripts.live", m("role", "user", "content", "two"))
	for range viewers {
		require.Equal(t, fmt.Sprint(seq), <-events)
	}
	require.LessOrEqual(t, src.lookups.Load(), int64(2), "one lookup per record applied, for every viewer")
}

// metered is a Source that counts the bytes of records it hands on.
type metered struct {
	inspect.Source
	bytes atomic.Int64
}

func (s *metered) Records(ctx context.Context, session string, to uint64, fn func(uint64, []byte) error) error {
	return s.Source.Records(ctx, session, to, func(seq uint64, data []byte) error {
		s.bytes.Add(int64(len(data)))
		return fn(seq, data)
	})
}

func (s *metered) Record(ctx context.Context, seq uint64) (string, []byte, error) {
	subj, data, err := s.Source.Record(ctx, seq)
	s.bytes.Add(int64(len(data)))
	return subj, data, err
}

// TestHandler_ViewReadsBounded: a view of a session larger than a view
// reads (8 MiB by default) reads at most that much of its records,
// whichever page, sequence or format it asks for, and still lists every
// record; a session within the bound is explained whole.
func TestHandler_ViewReadsBounded(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	const records, size = 12, 1 << 20 // 12 MiB
	raw := make([]byte, size*3/4)
	var last uint64
	for i := range records {
		for k := range raw {
			raw[k] = byte(i + k)
		}
		last = in.publish("transcripts.big", m("role", "toolResult", "toolCallId", fmt.Sprint("b", i),
			"content", []any{m("type", "image", "data", base64.StdEncoding.EncodeToString(raw), "mimeType", "image/png")}))
	}
	src := &metered{Source: in.app.InspectSource()}
	ui := inspect.New(src, inspect.Options{Config: in.app.InspectConfig(), PageRecords: 5, ReadRecordBytes: 2 << 20})
	srv := httptest.NewServer(ui)
	t.Cleanup(func() { ui.Close(); srv.Close() })
	const bound = 8 << 20
	for _, p := range []string{"", "?page=1", "?page=2", "?format=json", "?at=10", "?at=10&page=1", "?at=10&format=json", fmt.Sprintf("?after=%d", last-1)} {
		src.bytes.Store(0)
		resp, err := http.Get(srv.URL + "/ui/sessions/big" + p)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
		require.LessOrEqual(t, src.bytes.Load(), int64(bound), "bytes of records read for %q", p)
		t.Logf("%-22s read %5.1f MiB of records, answered %d bytes", p, float64(src.bytes.Load())/(1<<20), len(body))
		switch p {
		case "":
			require.Equal(t, 5, strings.Count(string(body), `class="rec st-unexplained"`))
			require.Contains(t, string(body), "The session&#39;s 12 records up to seq 12 hold 12.0 MiB, more than the 8.0 MiB a view reads")
			require.Contains(t, string(body), "ctxd context big")
			require.Contains(t, string(body), `class="rec st-unexplained"`)
			require.Contains(t, string(body), "toolResult", "the records that fit are read and shown")
			require.NotContains(t, string(body), "not read for this page", "5 MiB fit")
			require.Contains(t, string(body), "no context built for this view")
		case "?at=10":
			require.Contains(t, string(body), "no context built for this view")
		case "?format=json":
			var got struct {
				Records []struct {
					Seq    uint64 `json:"seq"`
					Size   int    `json:"size"`
					Status string `json:"status"`
				} `json:"records"`
				Cut string `json:"cut"`
			}
			require.NoError(t, json.Unmarshal(body, &got))
			require.Len(t, got.Records, records)
			require.Equal(t, "unexplained", got.Records[0].Status)
			require.Greater(t, got.Records[0].Size, size)
			require.Contains(t, got.Cut, "ctxd inspect big")
		}
	}

	// A page reads its records newest first while they fit, and none
	// larger than ReadRecordBytes.
	ui = inspect.New(src, inspect.Options{Config: in.app.InspectConfig(), PageRecords: 5, ReadBytes: 3 << 20, ReadRecordBytes: 2 << 20})
	srv = httptest.NewServer(ui)
	t.Cleanup(func() { ui.Close(); srv.Close() })
	src.bytes.Store(0)
	resp, err := http.Get(srv.URL + "/ui/sessions/big")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.LessOrEqual(t, src.bytes.Load(), int64(3<<20))
	require.Equal(t, 3, strings.Count(string(body), "not read for this page: open the raw record"), "2 of 5 records of 1 MiB fit in 3 MiB")
	require.Regexp(t, `id="seq-12"[^\n]*\n[^\n]*\n<td>toolResult</td>`, string(body), "the newest is read")
	require.Contains(t, string(body), `href="/ui/sessions/big/records/8"`)
	ui = inspect.New(src, inspect.Options{Config: in.app.InspectConfig(), PageRecords: 5})
	srv = httptest.NewServer(ui)
	t.Cleanup(func() { ui.Close(); srv.Close() })
	src.bytes.Store(0)
	resp, err = http.Get(srv.URL + "/ui/sessions/big")
	require.NoError(t, err)
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Zero(t, src.bytes.Load(), "records past 1 MiB are not read for a preview")
	require.Equal(t, 5, strings.Count(string(body), "(a record of 1.0 MiB, not read for this page: open the raw record)"))
}

// A view lists at most MaxRecords of a session's records: a session of
// more (many small records) is refused with 413, naming the bound and
// the commands that read it whole, rather than listed into memory.
func TestHandler_ViewRecordsBounded(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	for i := range 12 {
		in.publish("transcripts.long", m("role", "user", "content", fmt.Sprint("m", i)))
	}
	in.publish("transcripts.short", m("role", "user", "content", "one"))
	ui := inspect.New(in.app.InspectSource(), inspect.Options{Config: in.app.InspectConfig(), MaxRecords: 10})
	srv := httptest.NewServer(ui)
	t.Cleanup(func() { ui.Close(); srv.Close() })
	for _, p := range []string{"", "?page=1", "?format=json", "?at=11", "?after=3"} {
		resp, err := http.Get(srv.URL + "/ui/sessions/long" + p)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%q: %s", p, body)
		require.Contains(t, string(body), "more than the 10 records a view lists", p)
		require.Contains(t, string(body), "ctxd inspect long", p)
	}
	resp, err := http.Get(srv.URL + "/ui/sessions/short")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// listCounting is a Source that counts the records it lists and the
// summaries asked for.
type listCounting struct {
	inspect.Source
	listed, summaries atomic.Int64
}

func (s *listCounting) Sizes(ctx context.Context, session string, from, to uint64, fn func(uint64, int) error) error {
	return s.Source.Sizes(ctx, session, from, to, func(seq uint64, size int) error {
		s.listed.Add(1)
		return fn(seq, size)
	})
}

func (s *listCounting) Summary(ctx context.Context, session string) (inspect.Summary, error) {
	s.summaries.Add(1)
	return s.Source.Summary(ctx, session)
}

// TestHandler_FollowListsWhatIsNew: a session larger than a view reads
// is listed once; after another record, its page lists that record only,
// and the pages following it ask the service for no summary (a session
// the service does not hold would be read whole for it).
func TestHandler_FollowListsWhatIsNew(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	const records, size = 12, 1 << 20
	raw := make([]byte, size*3/4)
	big := func(i int) any {
		return m("role", "toolResult", "toolCallId", fmt.Sprint("b", i),
			"content", []any{m("type", "image", "data", base64.StdEncoding.EncodeToString(raw), "mimeType", "image/png")})
	}
	for i := range records {
		in.publish("transcripts.big", big(i))
	}
	src := &listCounting{Source: in.app.InspectSource()}
	ui := inspect.New(src, inspect.Options{Config: in.app.InspectConfig(), Poll: 10 * time.Millisecond})
	srv := httptest.NewServer(ui)
	t.Cleanup(func() { ui.Close(); srv.Close() })
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get("/ui/sessions/big"))
	require.Equal(t, int64(records), src.listed.Load())

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/ui/sessions/big/events", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- d
			}
		}
		close(events)
	}()
	<-events
	seq := in.publish("transcripts.big", m("role", "user", "content", "one more"))
	require.Equal(t, fmt.Sprint(seq), <-events)
	require.Equal(t, http.StatusOK, get(fmt.Sprintf("/ui/sessions/big?after=%d", seq-1)))
	require.Zero(t, src.summaries.Load(), "no summary of the session asked for")
	// The new record's headers, once for the events and once for the page.
	require.Equal(t, int64(records+2), src.listed.Load(), "the page after lists the new record only")
}

// TestHandler_SessionsListSummarizesOnce: the sessions list asks the
// service for a session's summary once per record it stored, not once
// per list: a summary of a session of screenshots sizes hundreds of MiB
// of context.
func TestHandler_SessionsListSummarizesOnce(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	in.publish("transcripts.one", m("role", "user", "content", "one"))
	in.publish("transcripts.two", m("role", "user", "content", "two"))
	src := &listCounting{Source: in.app.InspectSource()}
	ui := inspect.New(src, inspect.Options{Config: in.app.InspectConfig()})
	srv := httptest.NewServer(ui)
	t.Cleanup(func() { ui.Close(); srv.Close() })
	list := func() string {
		resp, err := http.Get(srv.URL + "/ui/")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	first := list()
	require.Equal(t, int64(2), src.summaries.Load())
	require.Equal(t, first, list(), "the same list")
	require.Equal(t, int64(2), src.summaries.Load(), "no summary asked again")
	in.publish("transcripts.two", m("role", "assistant", "content", "three"))
	require.Contains(t, list(), "two")
	require.Equal(t, int64(3), src.summaries.Load(), "the session that moved only")
}

// TestHandler_PageBoundedManyParts: a record of thousands of images or of
// unpaired calls keeps the page small: its thumbnails, its rule and the
// dropped list are cut, with the rest a link away.
func TestHandler_PageBoundedManyParts(t *testing.T) {
	in := startInstance(t, inspect.Options{})
	var images, calls []any
	small := smallPNG(t)
	for range 5_000 {
		images = append(images, m("type", "image", "data", small, "mimeType", "image/png"))
	}
	for i := range 5_000 {
		calls = append(calls, m("type", "toolCall", "id", fmt.Sprintf("c%d", i), "name", "bash"))
	}
	in.publish("transcripts.h", m("role", "user", "content", images), m("role", "assistant", "content", calls))
	code, _, body := in.get("/ui/sessions/h")
	require.Equal(t, http.StatusOK, code)
	t.Logf("page %d bytes, %d thumbnails", len(body), strings.Count(body, "<img"))
	require.Less(t, len(body), 256<<10)
	require.Contains(t, body, "4980 more image(s)")
	require.Contains(t, body, "4800 more dropped")
}
