package perf

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"unicode/utf8"
)

// Kind says what a row's values measure.
type Kind int

// Kinds of rows.
const (
	Rate    Kind = iota // per second, higher is better
	Latency             // seconds, lower is better
	Bytes               // bytes, lower is better
)

// Row is one figure: ctxd's value beside the baseline's, from the same run.
type Row struct {
	Figure   string
	Kind     Kind
	Ctxd     float64
	Baseline float64
	Target   Target
	// Unmeasured, when set, says why Ctxd could not be measured: the row
	// has no value and misses its target.
	Unmeasured string
	// Ratios, when set, are the ratios of paired rounds, each round's
	// ctxd value against the baseline measured beside it: Ratio is their
	// median rather than the ratio of the medians Ctxd and Baseline.
	// Pairing reduces the effect of what changes between rounds on a
	// shared machine (other processes' load), which moves both sides of
	// a round alike.
	Ratios []float64
}

// Target is what a row should meet; the zero Target is none.
type Target struct {
	// MaxRatio and MinRatio bound ctxd / baseline (0: no bound).
	MaxRatio, MinRatio float64
	// MaxValue bounds ctxd's value itself, in the row's unit (0: no bound).
	MaxValue float64
	// Note explains the target in the table, e.g. "10x faster".
	Note string
}

// Ratio is ctxd's value divided by the baseline's: the median of Ratios
// when the row has them.
func (r Row) Ratio() float64 {
	if len(r.Ratios) > 0 {
		return median(r.Ratios)
	}
	if r.Baseline == 0 {
		return 0
	}
	return r.Ctxd / r.Baseline
}

// Met reports whether the row meets its target; ok is false when it has
// none.
func (r Row) Met() (met, ok bool) {
	t := r.Target
	if r.Unmeasured != "" {
		return false, true
	}
	met = true
	if t.MaxRatio > 0 {
		ok, met = true, met && r.Ratio() <= t.MaxRatio
	}
	if t.MinRatio > 0 {
		ok, met = true, met && r.Ratio() >= t.MinRatio
	}
	if t.MaxValue > 0 {
		ok, met = true, met && r.Ctxd <= t.MaxValue
	}
	return met && ok, ok
}

func (t Target) String() string {
	var parts []string
	if t.MaxRatio > 0 {
		parts = append(parts, "≤ "+formatRatio(t.MaxRatio))
	}
	if t.MinRatio > 0 {
		parts = append(parts, "≥ "+formatRatio(t.MinRatio))
	}
	if t.MaxValue > 0 {
		parts = append(parts, "≤ "+formatSeconds(t.MaxValue))
	}
	if len(parts) == 0 {
		return "-"
	}
	s := strings.Join(parts, ", ")
	if t.Note != "" {
		s += " (" + t.Note + ")"
	}
	return s
}

// Report is the outcome of a run.
type Report struct {
	Machine string
	Rows    []Row
	// Warnings are what the run met that the figures do not show.
	Warnings []string
}

// Missed returns the figures of the rows that miss their targets.
func (rep *Report) Missed() []string {
	var out []string
	for _, r := range rep.Rows {
		if met, ok := r.Met(); ok && !met {
			out = append(out, r.Figure)
		}
	}
	return out
}

// Targets returns the number of rows that have a target.
func (rep *Report) Targets() int {
	n := 0
	for _, r := range rep.Rows {
		if _, ok := r.Met(); ok {
			n++
		}
	}
	return n
}

// Baselines says, per figure, what each side of its rows measures.
var Baselines = []string{
	"ingest: records/s from the first publish until ctxd has applied the last record (store watermark), ctxd consuming while the records are published; baseline: an ordered consumer that does nothing seeing the same records, while they are published to an identical stream that nothing else reads, until it has seen the last; second row (the figure's resolution, A/A): the same ordered consumer run twice in each round, its second run against its first, the ratio a round moves by when nothing differs; third row: JetStream async publish of the same records with nobody consuming, until the last ack; fourth row: the same records through a durable consumer like ctxd's (bus.StartIngest) whose handler does nothing",
	"fetch: latency of ctxd.context.<session> (a live session holding N messages since its latest compaction); baseline: a bare NATS responder returning the same bytes; requests interleaved, one client",
	"clients: requests/s of several clients, each on its own connection, fetching one session; baseline: the same against the bare responder",
	"turn: p50 of a turn with ctxd: publish the turn's records (each acknowledged), then fetch with min_seq the last acknowledgement's sequence; baseline: the same turn with a responder that rebuilds per request as a store-and-rebuild design does (direct-get read of the session's records, decode, projection.Build, JSON encode, reply), on its own connection; both timed from the first publish to the reply in hand, turns interleaved and appended to one session, which grows as they run. Second row: a fetch of a session that received no new records, against the same rebuild",
	"rebuild: records/s of ctxd rebuild over the stream (a compaction every 100 records of a session): first row, gathering every session's checkpoint (decoding only the records that could be compactions) and writing them, which is what the command does; second row, rebuilding whole projections on worker goroutines, as --check does; baseline: a raw ordered consumer reading the same stream",
	"cold: latency of a fetch whose session was evicted (read, decode, apply, render); baseline: a client reading the same records by sequence with pipelined direct gets that check each record's subject (bus.ReadSubjectSeqs), as ctxd's loader does",
	"memory: heap in use per loaded session (after GC, freed when the sessions are evicted); baseline: the bytes of the context replies of those sessions",
}

// WriteTable prints the machine line, the table and what the baselines
// are, as Markdown.
func (rep *Report) WriteTable(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s\n\n", rep.Machine)
	rows := [][]string{{"figure", "ctxd", "baseline", "ratio", "target", "met?"}}
	for _, r := range rep.Rows {
		met := "-"
		if m, ok := r.Met(); ok {
			met = map[bool]string{true: "yes", false: "NO"}[m]
		}
		value, ratio := r.format(r.Ctxd), formatRatio(r.Ratio())
		if r.Unmeasured != "" {
			value, ratio = "unmeasured", "-"
		}
		rows = append(rows, []string{r.Figure, value, r.format(r.Baseline), ratio, r.Target.String(), met})
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	line := func(cells []string) {
		bw.WriteString("|")
		for i, c := range cells {
			pad := widths[i] - utf8.RuneCountInString(c)
			if i > 0 && i < 4 { // numbers align right
				fmt.Fprintf(bw, " %s%s |", strings.Repeat(" ", pad), c)
			} else {
				fmt.Fprintf(bw, " %s%s |", c, strings.Repeat(" ", pad))
			}
		}
		bw.WriteString("\n")
	}
	line(rows[0])
	sep := make([]string, len(widths))
	for i, w := range widths {
		sep[i] = strings.Repeat("-", w)
		if i > 0 && i < 4 {
			sep[i] = strings.Repeat("-", w-1) + ":"
		}
	}
	line(sep)
	for _, row := range rows[1:] {
		line(row)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(bw, "\nWARNING: %s\n", w)
	}
	fmt.Fprintf(bw, "\nratio = ctxd / baseline; for the ingest rows, the median of the rounds' ratios, each round's ctxd against the baseline measured in the same round (the columns are the medians of the rounds).\n")
	for _, b := range Baselines {
		fmt.Fprintf(bw, "- %s\n", b)
	}
	return bw.Flush()
}

func (r Row) format(v float64) string {
	switch r.Kind {
	case Rate:
		switch {
		case v >= 1e6:
			return fmt.Sprintf("%.2fM/s", v/1e6)
		case v >= 1e4:
			return fmt.Sprintf("%.1fk/s", v/1e3)
		}
		return fmt.Sprintf("%.0f/s", v)
	case Bytes:
		switch {
		case v >= 1<<20:
			return fmt.Sprintf("%.2f MiB", v/(1<<20))
		case v >= 1<<10:
			return fmt.Sprintf("%.1f KiB", v/(1<<10))
		}
		return fmt.Sprintf("%.0f B", v)
	}
	return formatSeconds(v)
}

func formatSeconds(v float64) string {
	switch {
	case v < 1e-3:
		return fmt.Sprintf("%.0f µs", v*1e6)
	case v < 1:
		return fmt.Sprintf("%.2f ms", v*1e3)
	}
	return fmt.Sprintf("%.2f s", v)
}

func formatRatio(v float64) string {
	if v < 0.1 {
		return fmt.Sprintf("%.3fx", v)
	}
	return fmt.Sprintf("%.2fx", v)
}

// machine describes the machine the run is on.
func machine() string {
	model, mem := "unknown CPU", ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && k == "MemTotal" {
				var kb float64
				fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
				mem = fmt.Sprintf(", %.1f GiB memory", kb/(1<<20))
				break
			}
		}
	}
	load := ""
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			load = fmt.Sprintf(", load average %s %s %s at start", f[0], f[1], f[2])
		}
	}
	rev := ""
	if info, ok := debug.ReadBuildInfo(); ok {
		var commit, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if commit != "" {
			rev = ", ctxd " + commit[:min(12, len(commit))]
			if modified == "true" {
				rev += " (modified)"
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs (GOMAXPROCS %d)%s, %s %s/%s%s%s",
		model, runtime.NumCPU(), runtime.GOMAXPROCS(0), mem, runtime.Version(), runtime.GOOS, runtime.GOARCH, rev, load)
}
