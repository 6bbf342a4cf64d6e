//go:build !slow

package integration

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
)

var importBenchMB = flag.Int("import.mb", 100, "size in MB of the Claude Code file BenchmarkImport generates")

// BenchmarkImport times ctxd import of a file beside ctxd publish of the
// same records already converted (by ctxd import --print), plain and with
// --msg-id-prefix (which, like import, sends a Nats-Msg-Id per record), as
// a user runs them: the built binary against ctxd serve, each into a
// session of its own, in turn, each run once the service has applied the
// records of the one before. It reports the rates in records/s and
// import's ratio to each:
//
//	go test ./integration -run '^$' -bench BenchmarkImport -benchtime 5x
func BenchmarkImport(b *testing.B) {
	b.Run("largest-sample", func(b *testing.B) {
		benchImport(b, "../pkg/importer/testdata/pi/before-compaction.jsonl", "pi")
	})
	b.Run(fmt.Sprintf("claude-code-%dMB", *importBenchMB), func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "generated.jsonl")
		f, err := os.Create(path)
		require.NoError(b, err)
		w := bufio.NewWriter(f)
		writeClaudeSession(w, int64(*importBenchMB)<<20, 1)
		require.NoError(b, w.Flush())
		require.NoError(b, f.Close())
		benchImport(b, path, "claude-code")
	})
}

func benchImport(b *testing.B, path, format string) {
	bin := ctxdBinary(b)
	url := natstest.Start(b)
	startProcess(b, "--nats", url)
	records := filepath.Join(b.TempDir(), "records.jsonl")
	out, err := os.Create(records)
	require.NoError(b, err)
	cmd := exec.Command(bin, "import", "--from", format, "--print", path)
	cmd.Stdout = out
	require.NoError(b, cmd.Run())
	require.NoError(b, out.Close())
	st, err := os.Stat(path)
	require.NoError(b, err)
	n := countLines(b, records)

	sides := []struct {
		name string
		args func(session string) []string
		time time.Duration
	}{
		{"import", func(s string) []string {
			return []string{"import", "--nats", url, "--from", format, "--session", s, path}
		}, 0},
		{"publish", func(s string) []string {
			return []string{"publish", "--nats", url, "--session", s, records}
		}, 0},
		{"publish-ids", func(s string) []string {
			return []string{"publish", "--nats", url, "--session", s, "--msg-id-prefix", s, records}
		}, 0},
	}
	nc := newClient(b, url).nc
	runSide := func(session string, args []string) time.Duration {
		var stdout, stderr strings.Builder
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		elapsed := time.Since(start)
		require.NoError(b, err, "%s", stderr.String())
		// Untimed: wait until the service has applied the records, so that
		// the next run does not share the machine with their ingestion.
		fields := strings.Fields(stdout.String())
		require.NotEmpty(b, fields)
		seq, err := strconv.ParseUint(fields[len(fields)-1], 10, 64)
		require.NoError(b, err)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err = ctxdclient.Context(ctx, nc, session, ctxdclient.Request{MinSeq: seq, WaitMS: 30000})
		require.NoError(b, err)
		return elapsed
	}
	// A first round, not timed: the stream's files and the page cache warm.
	for _, side := range sides {
		runSide("warm-"+side.name, side.args("warm-"+side.name))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range sides {
			side := &sides[(i+k)%len(sides)] // each side goes first in turn
			session := fmt.Sprintf("%s-%d", side.name, i)
			side.time += runSide(session, side.args(session))
		}
	}
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(n*b.N) / d.Seconds() }
	importRate, publishRate, idsRate := rate(sides[0].time), rate(sides[1].time), rate(sides[2].time)
	b.ReportMetric(importRate, "import-records/s")
	b.ReportMetric(publishRate, "publish-records/s")
	b.ReportMetric(importRate/publishRate, "import/publish")
	b.ReportMetric(importRate/idsRate, "import/publish-ids")
	b.ReportMetric(0, "ns/op")
	b.Logf("%s: %d bytes, %d records: import %.0f records/s (%.1f MB/s); publish %.0f records/s, ratio %.2f; publish with --msg-id-prefix %.0f records/s, ratio %.2f",
		filepath.Base(path), st.Size(), n, importRate, float64(st.Size())*float64(b.N)/sides[0].time.Seconds()/1e6,
		publishRate, importRate/publishRate, idsRate, importRate/idsRate)
}

func countLines(t testing.TB, path string) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	n := 0
	for sc.Scan() {
		n++
	}
	require.NoError(t, sc.Err())
	return n
}

// writeClaudeSession writes a Claude Code session of about size bytes, in
// the shape of the real files: each turn a user prompt, then an API
// response written one content block a line (thinking, text, one to three
// parallel tool calls sharing a message id and chained), the results
// hanging off their calls and the conversation going on from the first
// one; now and then a pasted screenshot, and metadata lines.
func writeClaudeSession(w io.Writer, size int64, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	words := strings.Fields("the build fails because the handler returns before the writer flushes so the test sees an empty body and the retry loop never ends until the context expires")
	text := func(n int) string {
		var sb strings.Builder
		for i := 0; i < n; i++ {
			sb.WriteString(words[rng.IntN(len(words))])
			sb.WriteByte(' ')
		}
		return sb.String()
	}
	shot := make([]byte, 200<<10)
	for i := range shot {
		shot[i] = byte(rng.Uint32())
	}
	image := base64.StdEncoding.EncodeToString(shot)
	const session = "9b1de1f6-6c5e-4d4e-9a51-2f7d0c9e1a11"
	var written int64
	n, parent := 0, ""
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	line := func(typ string, m map[string]any) string {
		n++
		uuid := fmt.Sprintf("%08x-0000-4000-8000-%012x", seed, n)
		m["type"], m["uuid"], m["sessionId"], m["isSidechain"] = typ, uuid, session, false
		m["cwd"], m["version"], m["gitBranch"], m["userType"] = "/home/dev/repo", "2.1.114", "main", "external"
		if _, ok := m["parentUuid"]; !ok {
			if parent == "" {
				m["parentUuid"] = nil
			} else {
				m["parentUuid"] = parent
			}
		}
		ts = ts.Add(time.Duration(rng.IntN(5000)) * time.Millisecond)
		m["timestamp"] = ts.Format("2006-01-02T15:04:05.000Z")
		b, _ := json.Marshal(m)
		b = append(b, '\n')
		w.Write(b)
		written += int64(len(b))
		return uuid
	}
	for turn := 0; written < size; turn++ {
		content := []any{map[string]any{"type": "text", "text": text(20 + rng.IntN(80))}}
		if turn%150 == 149 {
			content = append(content, map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": image}})
		}
		parent = line("user", map[string]any{"message": map[string]any{"role": "user", "content": content}})
		msg := func(id string, block map[string]any) map[string]any {
			return map[string]any{"requestId": "req_" + id, "message": map[string]any{
				"id": id, "type": "message", "role": "assistant", "model": "claude-opus-4-5",
				"content": []any{block}, "stop_reason": nil,
				"usage": map[string]any{"input_tokens": 1200, "output_tokens": 300},
			}}
		}
		for step := 0; step < 1+rng.IntN(4); step++ {
			id := fmt.Sprintf("msg_%d_%d", turn, step)
			parent = line("assistant", msg(id, map[string]any{"type": "thinking", "thinking": text(40), "signature": "EqQBCkYIBBgCKkA" + text(3)}))
			parent = line("assistant", msg(id, map[string]any{"type": "text", "text": text(30 + rng.IntN(60))}))
			calls := 1 + rng.IntN(3)
			var callLines, ids []string
			for c := 0; c < calls; c++ {
				tid := fmt.Sprintf("toolu_%d_%d_%d", turn, step, c)
				parent = line("assistant", msg(id, map[string]any{"type": "tool_use", "id": tid, "name": "Bash", "input": map[string]any{"command": "go test ./... -run " + words[rng.IntN(len(words))]}}))
				callLines, ids = append(callLines, parent), append(ids, tid)
			}
			for c := calls - 1; c >= 0; c-- {
				out := text(200 + rng.IntN(1200))
				parent = line("user", map[string]any{"parentUuid": callLines[c], "message": map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "tool_result", "tool_use_id": ids[c], "content": out, "is_error": false},
				}}, "toolUseResult": map[string]any{"stdout": out, "stderr": "", "interrupted": false}})
			}
		}
		if turn%10 == 0 {
			b, _ := json.Marshal(map[string]any{"type": "file-history-snapshot", "messageId": parent, "snapshot": map[string]any{"trackedFileBackups": map[string]any{}}})
			w.Write(append(b, '\n'))
			written += int64(len(b) + 1)
		}
	}
}
