package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progress reports a long job: a bar redrawn in place on a terminal,
// plain lines every few seconds otherwise.
type progress struct {
	w        io.Writer
	what     string
	total    uint64
	tty      bool
	unit     string // what is counted: "records" unless set
	start    time.Time
	last     time.Time
	interval time.Duration
}

func newProgress(w io.Writer, what string, total uint64) *progress {
	p := &progress{w: w, what: what, total: total, unit: "records", start: time.Now(), interval: 2 * time.Second}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.interval = true, 200*time.Millisecond
		}
	}
	return p
}

// update reports done records of total, at most every interval.
func (p *progress) update(done uint64) {
	now := time.Now()
	if now.Sub(p.last) < p.interval {
		return
	}
	p.last = now
	p.print(done, false)
}

// finish prints the final state.
func (p *progress) finish(done uint64) { p.print(done, true) }

func (p *progress) print(done uint64, final bool) {
	elapsed := time.Since(p.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed
	}
	eta := "?"
	if rate > 0 && p.total >= done {
		eta = (time.Duration(float64(p.total-done)/rate) * time.Second).Round(time.Second).String()
	}
	if p.tty {
		const width = 30
		filled := width
		if p.total > 0 {
			filled = int(min(done, p.total) * width / p.total)
		}
		bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
		fmt.Fprintf(p.w, "\r%s [%s] %d/%d %s  %.0f %s/s  ETA %s ", p.what, bar, done, p.total, p.unit, rate, p.unit, eta)
		if final {
			fmt.Fprintln(p.w)
		}
		return
	}
	fmt.Fprintf(p.w, "%s: %d/%d %s, %.0f %s/s, ETA %s\n", p.what, done, p.total, p.unit, rate, p.unit, eta)
}
