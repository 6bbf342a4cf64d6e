package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/perf"
)

// The quick bench, shrunk to tiny sizes, runs and prints every row, with
// no warning under the table: ctxd passed over no record it was sent. It
// checks that the bench works, never how fast anything is.
func TestBench_Smoke(t *testing.T) {
	profiles := t.TempDir()
	code, out, errOut := runCmd(t, "", "bench", "--quick", "--dir", t.TempDir(),
		"--rounds", "1", "--ingest-rounds", "1", "--ingest-cpuprofiles", profiles,
		"--screenshot-bytes", "4096", "--screenshot-every", "10",
		"--ingest-records", "300", "--ingest-sessions", "3",
		"--fetch-messages", "20,40", "--fetch-samples", "10",
		"--clients", "2", "--clients-messages", "40", "--clients-time", "100ms",
		"--turn-messages", "40", "--turn-samples", "3",
		"--rebuild-records", "600", "--rebuild-sessions", "6",
		"--cold-records", "300", "--cold-session-records", "30", "--cold-samples", "5",
		"--memory-sessions", "4", "--memory-settle", "0")
	// Sizes this small miss targets (it checks that the bench works, never
	// how fast anything is): a missed one is exit 1, and named.
	missed := strings.Count(out, "| NO ")
	t.Logf("targets missed: %d", missed)
	if missed > 0 {
		require.Equal(t, 1, code, "stderr: %s", errOut)
		require.Regexp(t, `ctxd bench: \d+ of \d+ targets missed: `, errOut)
	} else {
		require.Equal(t, 0, code, "stderr: %s", errOut)
	}
	require.NotRegexp(t, `\| -\d`, out, "no figure is negative")
	for _, side := range []string{"ctxd", "ordered", "raw", "bare", "ordered-again"} {
		require.FileExists(t, filepath.Join(profiles, side+"-1.prof"))
	}
	for _, row := range []string{
		"ingest, 3 sessions, vs ordered consumer (records/s)",
		"ingest's resolution: the ordered consumer again, vs itself (A/A, records/s)",
		"ingest vs raw publish (records/s)",
		"ingest vs bare durable consumer (records/s)",
		"fetch 20 msgs p50", "fetch 20 msgs p99", "fetch 20 msgs p999",
		"fetch 40 msgs p50", "fetch 40 msgs p99", "fetch 40 msgs p999",
		"fetch 40 msgs, 2 clients (req/s)",
		"turn (publish + fetch at min_seq) vs rebuild, 40 msgs p50",
		"fetch, no new records, vs rebuild, 40 msgs p50",
		"rebuild 600 records, checkpoints (records/s)",
		"rebuild 600 records, full projections (records/s)",
		"cold load, 30 records p50", "cold load, 30 records p99",
		"memory per live session, 30 records",
	} {
		require.Contains(t, out, "| "+row+" ", "the table has a row %q:\n%s", row, out)
	}
	var rows int
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| figure") && !strings.HasPrefix(line, "| ---") {
			rows++
			cells := strings.Split(strings.Trim(line, "| "), " | ")
			require.Len(t, cells, 6, "row %q", line)
			require.Contains(t, []string{"yes", "NO", "-"}, strings.TrimSpace(cells[5]), "row %q", line)
		}
	}
	require.Equal(t, 18, rows, "rows:\n%s", out)
	require.Empty(t, benchWarnings(out), "the bench warned:\n%s", out)
	require.Contains(t, errOut, "bench done")
}

// benchWarnings returns the warnings printed under the bench's table:
// records ctxd's watermark passed without applying or rejecting them.
func benchWarnings(table string) []string {
	var out []string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "WARNING: ") {
			out = append(out, line)
		}
	}
	return out
}

// TestBench_Smoke fails on a table that warns of records passed over.
func TestBenchWarnings(t *testing.T) {
	rep := &perf.Report{Machine: "m", Rows: []perf.Row{{Figure: "fetch 20 msgs p50", Kind: perf.Latency, Ctxd: 1e-3, Baseline: 1e-3}}}
	var clean bytes.Buffer
	require.NoError(t, rep.WriteTable(&clean))
	require.Empty(t, benchWarnings(clean.String()))

	rep.Warnings = []string{"fetch: ctxd's watermark is at 100, but it applied 90 and rejected 2 of the 100 records published: 8 records were passed over"}
	var warned bytes.Buffer
	require.NoError(t, rep.WriteTable(&warned))
	require.Equal(t, []string{"WARNING: " + rep.Warnings[0]}, benchWarnings(warned.String()))
}

func TestBench_Usage(t *testing.T) {
	code, _, errOut := runCmd(t, "", "bench", "--figures", "fetch,speed")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown figure "speed"`)

	code, _, _ = runCmd(t, "", "bench", "extra")
	require.Equal(t, 2, code)

	// One CPU profile runs at a time.
	dir := t.TempDir()
	code, _, errOut = runCmd(t, "", "bench", "--cpuprofile", filepath.Join(dir, "run.prof"), "--ingest-cpuprofiles", dir)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "exclude each other")

	code, out, errOut := runCmd(t, "", "bench", "--help")
	require.Equal(t, 0, code, out)
	require.Contains(t, errOut, "--quick")
	require.Contains(t, errOut, "-cpuprofile")
	require.Contains(t, errOut, "-ingest-cpuprofiles")
}
