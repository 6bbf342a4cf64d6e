// Helpers shared by the two tiers of this package: the fast one (go test
// ./...: files built without the tag slow) and the process, cluster and
// fault tier (go test -tags slow ./integration, make slow).

package integration

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"
)

// instanceStats is the part of an instance's $SRV.STATS the tests read.
type instanceStats struct {
	Instance string `json:"instance"`
	Role     string `json:"role"`
	Applied  uint64 `json:"applied"`
	// Partitions the instance applies, on a partitioned stream.
	Partitions []int `json:"partitions"`
	// Records its stores took in.
	Records uint64 `json:"records"`
}

// proc is ctxd serve running as a separate process.
type proc struct {
	cmd    *exec.Cmd
	url    string
	stderr *strings.Builder
	done   chan error
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// startProcess runs `ctxd serve` with args and waits for its ready line.
func startProcess(t testing.TB, args ...string) *proc {
	t.Helper()
	p, err := tryProcess(t, args...)
	require.NoError(t, err)
	return p
}

// fetchChecked fetches a session's context with min_seq at least mark
// and its last record in the stream, and fails the test unless the reply
// equals Build of what the stream holds of it. A record stored after a
// removal, as mark, is applied after it: the reply cannot be one built
// before the removal.
func (c *client) fetchChecked(session, label string, mark uint64) {
	c.t.Helper()
	recs := c.holds(session)
	var minSeq uint64
	if len(recs) > 0 {
		minSeq = recs[len(recs)-1].Seq
	}
	msg := c.request("ctxd.context."+session, []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":10000}`, max(minSeq, mark))), nil)
	require.Empty(c.t, msg.Header.Get(micro.ErrorCodeHeader), "%s: %s: error reply %s", label, session, msg.Header.Get(micro.ErrorHeader))
	if diff := checkReply(c.t, read{session: session, minSeq: minSeq, data: msg.Data}, recs); diff != "" {
		c.t.Fatalf("%s: %s: %s (the stream holds %d records of it)", label, session, diff, len(recs))
	}
}

// wait returns the process's exit error once it exits.
func (p *proc) wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("ctxd did not exit within 30s")
		return nil
	}
}

var purgeActions = []purgeAction{
	{"subject", func(ctx context.Context, st jetstream.Stream, _ []uint64) error {
		return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.p1"))
	}},
	{"subject_seq", func(ctx context.Context, st jetstream.Stream, p1 []uint64) error {
		// Every record of p1 before its fifth: the compaction goes.
		return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.p1"), jetstream.WithPurgeSequence(p1[4]))
	}},
	{"subject_keep", func(ctx context.Context, st jetstream.Stream, _ []uint64) error {
		return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.p1"), jetstream.WithPurgeKeep(2))
	}},
	{"stream", func(ctx context.Context, st jetstream.Stream, _ []uint64) error {
		return st.Purge(ctx)
	}},
	{"stream_seq", func(ctx context.Context, st jetstream.Stream, p1 []uint64) error {
		return st.Purge(ctx, jetstream.WithPurgeSequence(p1[3]))
	}},
	{"rmm_compaction", func(ctx context.Context, st jetstream.Stream, p1 []uint64) error {
		return st.DeleteMsg(ctx, p1[2])
	}},
	{"rmm_last", func(ctx context.Context, st jetstream.Stream, p1 []uint64) error {
		return st.DeleteMsg(ctx, p1[len(p1)-1])
	}},
	{"rmm_secure", func(ctx context.Context, st jetstream.Stream, p1 []uint64) error {
		return st.SecureDeleteMsg(ctx, p1[4])
	}},
}

// ctxdBinary builds cmd/ctxd once per test run.
func ctxdBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ctxd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "ctxd")
		args := []string{"build", "-o", binPath}
		if *raceBinary {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "../cmd/ctxd")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// purgeAction is what an operator does to the stream; p1 is the
// session it aims at, given as the records published to it.
type purgeAction struct {
	name string
	do   func(ctx context.Context, st jetstream.Stream, p1 []uint64) error
}

type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

// publishPurgeSessions publishes interleaved records of p1 and p2, each
// with a compaction, and returns p1's sequences.
func publishPurgeSessions(c *client, round string) (p1 []uint64, last uint64) {
	for i := range 7 {
		for _, id := range []string{"p1", "p2"} {
			v := any(record.NewMap("role", []string{"user", "assistant"}[i%2], "content", fmt.Sprintf("%s %s %d", id, round, i)))
			if i == 2 {
				v = purgeCompaction
			}
			last = c.publishValue(id, v, false)
			if id == "p1" {
				p1 = append(p1, last)
			}
		}
	}
	return p1, last
}

// purgeCompaction is a valid compaction record.
var purgeCompaction = record.NewMap("type", "compaction", "at", "2026-01-01T00:00:00Z", "baseSeq", int64(1), "plannerVersion", int64(1),
	"summaryModelRef", "m", "summary", "s", "qualityAudit", "passed",
	"messages", []any{record.NewMap("role", "user", "content", "summary")},
	"firstKeptIndex", int64(0), "tokensBefore", int64(10), "tokensAfter", int64(5))

// holds returns the session's records the stream holds now, read
// through JetStream, not through ctxd.
func (c *client) holds(session string) []projection.Record {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	subj := "transcripts." + session
	st, err := c.js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(c.t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	require.NoError(c.t, err)
	n := info.State.Subjects[subj]
	if n == 0 {
		return nil
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	require.NoError(c.t, err)
	out := make([]projection.Record, 0, n)
	for range n {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		require.NoError(c.t, err)
		meta, err := m.Metadata()
		require.NoError(c.t, err)
		v, err := record.DecodeJSON(m.Data())
		require.NoError(c.t, err)
		out = append(out, projection.Record{Seq: meta.Sequence.Stream, Value: v})
	}
	// Not left to expire: a long run reads the stream many times a
	// second, past the server's bound on consumers.
	if info := cons.CachedInfo(); info != nil {
		require.NoError(c.t, st.DeleteConsumer(ctx, info.Name))
	}
	return out
}

// checkReply compares a context reply with Build over the session's
// records up to the reply's seq, and returns what differs, or "".
func checkReply(t testing.TB, r read, recs []projection.Record) string {
	t.Helper()
	got := decodeReply(t, r.data)
	if got.Session != r.session {
		return fmt.Sprintf("reply for session %q", got.Session)
	}
	if got.Seq < r.minSeq {
		return fmt.Sprintf("stale: seq %d, below min_seq %d", got.Seq, r.minSeq)
	}
	n := 0
	for n < len(recs) && recs[n].Seq <= got.Seq {
		n++
	}
	if got.Seq > 0 && (n == 0 || recs[n-1].Seq != got.Seq) {
		return fmt.Sprintf("seq %d is no record of the session", got.Seq)
	}
	want := projection.Build(recs[:n], projection.Options{})
	if !record.Equal(asReplied(t, want.Messages, false), got.Messages) {
		return fmt.Sprintf("messages at seq %d differ from Build over its %d records: %s", got.Seq, n, diffPath("", asReplied(t, want.Messages, false), got.Messages))
	}
	dropped := mustDecode(t, string(mustJSON(t, want.Dropped)))
	if !record.Equal(dropped, got.Dropped) {
		return fmt.Sprintf("dropped at seq %d differs from Build's: %s", got.Seq, diffPath("", dropped, got.Dropped))
	}
	return ""
}

// read is one context reply a writer received while ctxd was being
// killed, kept to be checked once the records of unknown outcome are
// known.
type read struct {
	session string
	minSeq  uint64 // 0: none asked
	data    []byte
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func mustDecode(t testing.TB, s string) any {
	t.Helper()
	v, err := record.DecodeJSON([]byte(s))
	require.NoError(t, err)
	return v
}

// shutdownSessions is how many sessions TestProcess_ShutdownManySessions
// holds when it stops ctxd; -shutdown.sessions=200000 is the size of a
// large instance (about a minute to fill on a small machine).
var shutdownSessions = flag.Int("shutdown.sessions", 20000, "sessions ctxd holds when TestProcess_ShutdownManySessions stops it")

// fillSessions publishes one compaction per session, so every session's
// latest compaction is known and has a checkpoint to write at shutdown,
// and returns the last record's sequence.
func fillSessions(t testing.TB, js jetstream.JetStream, sessions int) uint64 {
	t.Helper()
	return publishWindowed(t, js, sessions, 4000, func(s int) (string, []byte) {
		return fmt.Sprintf("transcripts.many%d", s), []byte(fmt.Sprintf(`{"type":"compaction","at":"2026-01-01T00:00:00Z","baseSeq":1,"plannerVersion":1,`+
			`"summaryModelRef":"m","summary":"s","qualityAudit":"passed","messages":[{"role":"user","content":"c%d"}],`+
			`"firstKeptIndex":0,"tokensBefore":10,"tokensAfter":5}`, s))
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// httpGet returns the status and body of GET http://addr/path.
func httpGet(t *testing.T, addr, path string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	code, body := httpGet(t, addr, "/metrics")
	require.Equal(t, http.StatusOK, code, body)
	return body
}

// metricValue returns the value of the sample name{labels} in a scrape,
// or -1 when it is absent. labels are given as in the text format:
// `code="200",endpoint="context"` (sorted by name, as the format has them).
func metricValue(t *testing.T, scrape, name, labels string) float64 {
	t.Helper()
	sel := name
	if labels != "" {
		sel += "{" + labels + "}"
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sel) + ` (\S+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// tryProcess runs `ctxd serve` with args and waits for its ready line;
// the error says what it wrote when it exited before.
func tryProcess(t testing.TB, args ...string) (*proc, error) {
	t.Helper()
	cmd := exec.Command(ctxdBinary(t), append([]string{"serve"}, args...)...)
	if *ctxdEnv != "" {
		cmd.Env = append(os.Environ(), strings.Split(*ctxdEnv, ",")...)
	}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	p := &proc{cmd: cmd, stderr: &strings.Builder{}, done: make(chan error, 1)}
	errOut := &syncWriter{b: p.stderr}
	cmd.Stderr = errOut
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		p.done <- cmd.Wait()
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			err := <-p.done
			return nil, fmt.Errorf("ctxd exited before ready (%v): %s", err, errOut.String())
		}
		m := readyLine.FindStringSubmatch(line)
		require.NotNil(t, m, "first line %q is not the ready line", line)
		p.url = m[1]
	case <-time.After(60 * time.Second):
		t.Fatalf("ctxd not ready after 60s: %s", errOut.String())
	}
	return p, nil
}

// procStatus returns a field of /proc/<pid>/status in bytes.
func procStatus(b testing.TB, pid int, field string) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(b, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if ok && name == field {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			require.NoError(b, err)
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// diffPath names the first place two values differ, for failure messages.
func diffPath(path string, a, b any) string {
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok {
			return fmt.Sprintf("%s: %T(len %d) vs %T", path, a, len(x), b)
		}
		if len(x) != len(y) {
			return fmt.Sprintf("%s: %d items vs %d", path, len(x), len(y))
		}
		for i := range x {
			if d := diffPath(fmt.Sprintf("%s[%d]", path, i), x[i], y[i]); d != "" {
				return d
			}
		}
		return ""
	case *record.Map:
		y, ok := b.(*record.Map)
		if !ok || x.Len() != y.Len() {
			return fmt.Sprintf("%s: map(%d) vs %T", path, x.Len(), b)
		}
		for _, m := range x.Members {
			v, _ := y.Get(m.Key)
			if d := diffPath(path+"."+m.Key, m.Value, v); d != "" {
				return d
			}
		}
		return ""
	}
	if !record.Equal(a, b) {
		return fmt.Sprintf("%s: %T(%v) vs %T(%v)", path, a, a, b, b)
	}
	return ""
}

// publishWindowed publishes n records, record(i) giving the i-th's
// subject and data, with at most window acknowledgements outstanding, and
// returns the last one's sequence.
func publishWindowed(t testing.TB, js jetstream.JetStream, n, window int, record func(i int) (string, []byte)) uint64 {
	t.Helper()
	var last jetstream.PubAckFuture
	for i := range n {
		if js.PublishAsyncPending() >= window {
			<-js.PublishAsyncComplete()
		}
		subj, data := record(i)
		f, err := js.PublishAsync(subj, data)
		require.NoError(t, err)
		last = f
	}
	<-js.PublishAsyncComplete()
	select {
	case ack := <-last.Ok():
		return ack.Sequence
	case err := <-last.Err():
		t.Fatal(err)
	}
	return 0
}
