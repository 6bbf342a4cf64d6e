package perf

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// SoakWindow is one row of the soak's table.
type SoakWindow struct {
	Name              string // "0-30s", or "idle 10s"
	Turns, Errors     int
	Turn50, Turn99    time.Duration // publish the turn's records, then fetch at the last PubAck
	Bare50, Bare99    time.Duration // the same publishes to another stream, then a bare request-reply of the reply's bytes
	RSS, HeapInUse    int64
	CacheBytes, Disk  int64
	Load1             float64 // the machine's load average
	Took              time.Duration
	ReplyBytes        int64 // the median reply's bytes, whole
	SentBytes         int64 // the median reply's bytes as sent: the delta's
	RecordBytes       int64 // the median turn's records' bytes
	Idle              bool
	missedRSS, missed bool
	missedSent        bool
}

// SentRatio is the window's median bytes sent a turn over the median
// bytes of a turn's records.
func (w SoakWindow) SentRatio() float64 {
	if w.RecordBytes <= 0 {
		return 0
	}
	return float64(w.SentBytes) / float64(w.RecordBytes)
}

// Ratio is the window's turn p50 over its bare p50.
func (w SoakWindow) Ratio() float64 {
	if w.Bare50 <= 0 {
		return 0
	}
	return float64(w.Turn50) / float64(w.Bare50)
}

// SoakReport is what a soak measured.
type SoakReport struct {
	Windows  []SoakWindow
	Turns    int
	Errors   []string // the first errors, each once
	ErrCount int
	Checked  int // replies compared message by message
	RSSBound int64
	MaxRatio float64
	MaxSent  float64
	Delta    bool
}

// Missed lists the targets the soak missed: errors, a window's ratio,
// the RSS bound.
func (r *SoakReport) Missed() []string {
	var out []string
	if r.ErrCount > 0 {
		out = append(out, fmt.Sprintf("%d errors, the first: %s", r.ErrCount, r.Errors[0]))
	}
	for _, w := range r.Windows {
		if w.missed {
			out = append(out, fmt.Sprintf("window %s: turn p50 %.2fx bare, more than %.2fx", w.Name, w.Ratio(), r.MaxRatio))
		}
		if w.missedRSS {
			out = append(out, fmt.Sprintf("window %s: RSS %s, over the bound of %s", w.Name, mib(w.RSS), mib(r.RSSBound)))
		}
		if w.missedSent {
			out = append(out, fmt.Sprintf("window %s: %d bytes sent a turn, %.2fx the turn's records, more than %.2fx", w.Name, w.SentBytes, w.SentRatio(), r.MaxSent))
		}
	}
	return out
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// WriteTable writes the soak's table.
func (r *SoakReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "window\tturns\tturns/s\terrors\tturn p50\tturn p99\tbare p50\tbare p99\tp50 ratio\treply\tsent\trecords\tsent ratio\tRSS\theap in use\tcache\tdata dir\tload\t")
	for _, x := range r.Windows {
		if x.Idle {
			fmt.Fprintf(tw, "%s\t\t\t\t\t\t\t\t\t\t\t\t\t%s\t%s\t%s\t%s\t%.1f\t\n", x.Name, mib(x.RSS), mib(x.HeapInUse), mib(x.CacheBytes), mib(x.Disk), x.Load1)
			continue
		}
		rate := float64(x.Turns) / x.Took.Seconds()
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%s\t%s\t%s\t%s\t%.2fx\t%d KB\t%s\t%s\t%.2fx\t%s\t%s\t%s\t%s\t%.1f\t\n", x.Name, x.Turns, rate, x.Errors,
			ms(x.Turn50), ms(x.Turn99), ms(x.Bare50), ms(x.Bare99), x.Ratio(), x.ReplyBytes/1000, kb(x.SentBytes), kb(x.RecordBytes), x.SentRatio(),
			mib(x.RSS), mib(x.HeapInUse), mib(x.CacheBytes), mib(x.Disk), x.Load1)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	bound := "not judged"
	if r.RSSBound > 0 {
		bound = mib(r.RSSBound)
	}
	how := "every reply whole"
	if r.Delta {
		how = "replies as deltas against the agents' last ones (have_seq, have_digest)"
	}
	_, err := fmt.Fprintf(w, "%d turns, %d errors, %d replies compared message by message with the agents' own projections; %s; RSS bound %s, turn p50 at most %.2fx bare\n",
		r.Turns, r.ErrCount, r.Checked, how, bound, r.MaxRatio)
	return err
}

// kb writes a byte count in KB, or in bytes below 10 KB.
func kb(n int64) string {
	if n < 10_000 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%d KB", n/1000)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
