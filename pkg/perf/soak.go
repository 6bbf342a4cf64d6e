package perf

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/protocol"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/pkg/subject"
)

// SoakConfig is the shape of a soak: agents in a closed loop over
// sessions, for a while, against a ctxd serve process of its own.
type SoakConfig struct {
	// Command starts ctxd serve: the binary and its arguments (serve and
	// any flags, such as --cache-bytes). The soak adds --data, --host,
	// --port and --http, and runs it with its embedded server.
	Command []string
	// Env is added to the process's environment (GOMEMLIMIT=...).
	Env []string
	// Dir holds the process's data; empty: a temporary directory,
	// removed afterwards.
	Dir string

	Sessions int // sessions the agents take turns on
	Agents   int // agents, each in a closed loop
	// ScreenshotEvery makes every so many results a browser result with
	// a screenshot of ScreenshotBytes (base64); 0: none.
	ScreenshotEvery int
	ScreenshotBytes int
	// Duration of the load; Turns, when set, ends it instead once every
	// agent made that many turns (the test's short soak).
	Duration time.Duration
	Turns    int
	// Window is the period a row of the table covers.
	Window time.Duration
	// Idle is how long the process is watched, idle, after the load.
	Idle time.Duration
	// CheckEvery compares every so many replies of a session with the
	// agent's own projection of its records, message by message; every
	// reply's seq and message count are checked.
	CheckEvery int
	// BareEvery makes every so many turns of an agent followed by a bare
	// turn: enough samples for a window's percentiles, taken under the
	// same load, without doubling what the server writes.
	BareEvery int
	// RSSBound is the RSS the process should stay within (0: not
	// judged); MaxRatio the largest turn p50 / bare p50 of a window.
	RSSBound int64
	MaxRatio float64
	// Delta has each agent keep its sessions' last replies and ask
	// against them (have_seq, have_digest): the service sends the
	// messages after those it holds (a delta), and the agent puts the
	// whole reply back together (protocol.Held), as client.Keeper does.
	// Else every reply is asked for whole, as a client that keeps
	// nothing between turns. MaxSent is the largest median of a window's
	// bytes sent a turn over the bytes of the turn's own records, judged
	// with Delta (0: not judged).
	Delta   bool
	MaxSent float64

	// Progress receives a line per step; nil discards them.
	Progress io.Writer
}

// DefaultSoak is the 5-minute soak of docs/PERFORMANCE.md.
func DefaultSoak() SoakConfig {
	return SoakConfig{
		Sessions:        200,
		Agents:          40,
		ScreenshotEvery: 10,
		ScreenshotBytes: 100_000, // a 75 KB PNG
		Duration:        5 * time.Minute,
		Window:          30 * time.Second,
		Idle:            150 * time.Second,
		CheckEvery:      10,
		BareEvery:       4,
		MaxRatio:        1.5,
		MaxSent:         3,
	}
}

// soakSession is one session an agent takes turns on.
type soakSession struct {
	name  string
	gen   *workload.Generator
	proj  *projection.Session
	turns int
	held  *protocol.Held // the last reply, whole (deltas)
}

// soak is a running soak.
type soak struct {
	cfg  SoakConfig
	nc   *nats.Conn // the agents'
	js   jetstream.JetStream
	bare *nats.Conn // the bare responder's

	mu       sync.Mutex
	turn     []time.Duration
	bareLat  []time.Duration
	replies  []int
	sent     []int
	records  []int
	errs     int
	first    []string
	total    int
	errsSeen int // errors counted in earlier windows
	checked  atomic.Int64
}

// Soak runs a soak: it starts ctxd serve, drives it, and returns a row
// per window. A reply that is wrong counts as an error, as does a
// request or publish that fails.
func Soak(ctx context.Context, cfg SoakConfig) (*SoakReport, error) {
	if len(cfg.Command) == 0 || cfg.Sessions < 1 || cfg.Agents < 1 || cfg.Window <= 0 || (cfg.Duration <= 0 && cfg.Turns <= 0) {
		return nil, errors.New("soak: want a command, sessions, agents, a window and a duration or turns")
	}
	if cfg.CheckEvery < 1 {
		cfg.CheckEvery = 1
	}
	if cfg.BareEvery < 1 {
		cfg.BareEvery = 1
	}
	dir := cfg.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "ctxd-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append(slices.Clone(cfg.Command[1:]), "--data", data, "--host", "127.0.0.1", "--port", "-1", "--http", httpAddr)
	cmd := exec.Command(cfg.Command[0], args...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	logFile, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("soak: start %s: %w", cfg.Command[0], err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
			return waitErr
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			return fmt.Errorf("soak: ctxd serve did not stop within a minute of SIGINT: killed; see %s", logFile.Name())
		}
	}
	defer stop()
	url, err := readyURL(out, exited)
	if err != nil {
		return nil, fmt.Errorf("soak: ctxd serve: %w (its log: %s)", err, logFile.Name())
	}
	s := &soak{cfg: cfg}
	logf := func(format string, a ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", a...)
		}
	}
	logf("soak: ctxd serve (pid %d) ready at %s, operators' listener %s", cmd.Process.Pid, url, httpAddr)
	if s.nc, err = nats.Connect(url, nats.MaxReconnects(-1)); err != nil {
		return nil, err
	}
	defer s.nc.Close()
	if s.bare, err = nats.Connect(url); err != nil {
		return nil, err
	}
	defer s.bare.Close()
	if s.js, err = jetstream.New(s.nc); err != nil {
		return nil, err
	}
	if _, err := s.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "SOAK_BARE", Subjects: []string{"soakbare.>"}, Storage: jetstream.FileStorage,
		// Written like TRANSCRIPTS, but kept to 64 MiB, its oldest records
		// discarded: the data directory holds the service's stream.
		MaxBytes: 64 << 20}); err != nil {
		return nil, fmt.Errorf("soak: the bare stream: %w", err)
	}
	body := make([]byte, 64<<20)
	sub, err := s.bare.Subscribe("soak.bare", func(m *nats.Msg) {
		n := int(binary.BigEndian.Uint32(m.Data))
		_ = m.Respond(body[:min(n, len(body))])
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()

	sessions := make([]*soakSession, cfg.Sessions)
	prof := workload.Profile{ScreenshotBytes: cfg.ScreenshotBytes, ScreenshotEvery: 1, Screenshots: 3}
	for i := range sessions {
		sessions[i] = &soakSession{
			name: fmt.Sprintf("soak-%04d", i),
			gen:  workload.New(uint64(i+1), prof),
			proj: projection.New(projection.Options{BrowserTools: projection.DefaultBrowserTools}),
		}
	}

	rep := &SoakReport{RSSBound: cfg.RSSBound, MaxRatio: cfg.MaxRatio, MaxSent: cfg.MaxSent, Delta: cfg.Delta}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var finished atomic.Int32
	for a := range cfg.Agents {
		var mine []*soakSession
		for i := a; i < len(sessions); i += cfg.Agents {
			mine = append(mine, sessions[i])
		}
		if len(mine) == 0 {
			finished.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer finished.Add(1)
			for t := 0; runCtx.Err() == nil && (cfg.Turns == 0 || t < cfg.Turns); t++ {
				s.agentTurn(runCtx, mine[t%len(mine)])
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	start := time.Now()
	end := start.Add(cfg.Duration)
	if cfg.Turns > 0 {
		end = time.Time{}
	}
	ops := "http://" + httpAddr + "/metrics"
	from := start
	tick := time.NewTicker(cfg.Window)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			return nil, ctx.Err()
		case <-exited:
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("soak: ctxd serve exited during the load: %v; see %s", waitErr, logFile.Name())
		case <-tick.C:
		case <-allDone:
		}
		now := time.Now()
		if (!end.IsZero() && !now.Before(end)) || int(finished.Load()) == cfg.Agents {
			cancel()
			wg.Wait()
			running = false
			now = time.Now()
		}
		w := s.window(from, now, start)
		from = now
		s.sample(ctx, &w, cmd.Process.Pid, ops, data)
		w.missed = cfg.MaxRatio > 0 && w.Turns > 0 && w.Ratio() > cfg.MaxRatio
		w.missedRSS = cfg.RSSBound > 0 && w.RSS > cfg.RSSBound
		w.missedSent = cfg.Delta && cfg.MaxSent > 0 && w.Turns > 0 && w.SentRatio() > cfg.MaxSent
		rep.Windows = append(rep.Windows, w)
		logf("soak: %s: %d turns, %d errors, turn p50 %v p99 %v, bare p50 %v p99 %v (%.2fx), sent %s a turn (%.2fx its records), RSS %s, heap in use %s, cache %s, data %s, load %.1f",
			w.Name, w.Turns, w.Errors, w.Turn50, w.Turn99, w.Bare50, w.Bare99, w.Ratio(), kb(w.SentBytes), w.SentRatio(), mib(w.RSS), mib(w.HeapInUse), mib(w.CacheBytes), mib(w.Disk), w.Load1)
	}
	// Idle: what the process gives back with nothing to do.
	idleStart := time.Now()
	for step := cfg.Window / 3; cfg.Idle > 0 && time.Since(idleStart) < cfg.Idle; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-exited:
			return nil, fmt.Errorf("soak: ctxd serve exited while idle: %v; see %s", waitErr, logFile.Name())
		case <-time.After(min(step, cfg.Idle-time.Since(idleStart))):
		}
		w := SoakWindow{Name: fmt.Sprintf("idle %ds", int(time.Since(idleStart).Round(time.Second).Seconds())), Idle: true}
		s.sample(ctx, &w, cmd.Process.Pid, ops, data)
		w.missedRSS = cfg.RSSBound > 0 && w.RSS > cfg.RSSBound
		rep.Windows = append(rep.Windows, w)
		logf("soak: %s: RSS %s, heap in use %s", w.Name, mib(w.RSS), mib(w.HeapInUse))
	}
	s.mu.Lock()
	rep.Turns, rep.ErrCount, rep.Errors = s.total, s.errs, s.first
	s.mu.Unlock()
	rep.Checked = int(s.checked.Load())
	if err := stop(); err != nil {
		return rep, fmt.Errorf("soak: ctxd serve: %w; see %s", err, logFile.Name())
	}
	return rep, nil
}

// agentTurn makes one turn of a session: a tool call and its result
// published, each acknowledged, then the context fetched as msgpack at
// the last PubAck (as a delta against the last one, with Delta), put
// back together and checked; then the same with the bare baseline, a
// reply of the bytes sent.
func (s *soak) agentTurn(ctx context.Context, ss *soakSession) {
	var recs []any
	if every := s.cfg.ScreenshotEvery; every > 0 && ss.turns%every == every-1 && s.cfg.ScreenshotBytes > 0 {
		recs = ss.gen.BrowserTurn()
	} else {
		recs = ss.gen.CallPair()
	}
	ss.turns++
	data, err := workload.Encode(recs)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	seqs := make([]uint64, len(data))
	publish := func(subj string) (uint64, error) {
		for i, d := range data {
			pctx, cancel := context.WithTimeout(ctx, requestTimeout)
			ack, err := s.js.Publish(pctx, subj, d)
			cancel()
			if err != nil {
				return 0, fmt.Errorf("publish to %s: %w", subj, err)
			}
			seqs[i] = ack.Sequence
		}
		return seqs[len(seqs)-1], nil
	}
	t0 := time.Now()
	seq, err := publish(subject.TranscriptsPrefix + ss.name)
	if err != nil {
		s.fail(ctx, err)
		return
	}
	req := client.Request{MinSeq: seq, WaitMS: 10000, Msgpack: true}
	if s.cfg.Delta {
		if ss.held != nil {
			req.HaveSeq, req.HaveDigest = ss.held.Reply.Seq, ss.held.Reply.Digest
		}
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	body, err := client.Context(rctx, s.nc, ss.name, req)
	cancel()
	reply := body
	if err == nil && s.cfg.Delta {
		// The whole reply is part of the turn: the runtime's request
		// body is made of it.
		var next *protocol.Held
		if ss.held != nil {
			next, err = ss.held.Apply(body)
		} else {
			next, err = protocol.Hold(body)
		}
		if err == nil {
			reply, ss.held = next.Body, next
		} else {
			ss.held = nil // asked for whole next time
			err = fmt.Errorf("the delta does not apply: %w", err)
		}
	}
	took := time.Since(t0)
	// The agent's own projection: its records at their sequences, which
	// the stream holds whether the fetch succeeded or not.
	for i, v := range recs {
		ss.proj.Apply(seqs[i], v)
	}
	if err != nil {
		s.fail(ctx, fmt.Errorf("fetch %s at min_seq %d: %w", ss.name, seq, err))
		return
	}
	if err := s.check(ss, reply, seq); err != nil {
		s.fail(ctx, err)
		return
	}

	recBytes := 0
	for _, d := range data {
		recBytes += len(d)
	}
	s.mu.Lock()
	s.turn = append(s.turn, took)
	s.replies = append(s.replies, len(reply))
	s.sent = append(s.sent, len(body))
	s.records = append(s.records, recBytes)
	s.total++
	s.mu.Unlock()
	if ss.turns%s.cfg.BareEvery != 0 {
		return
	}

	b0 := time.Now()
	if _, err := publish("soakbare." + ss.name); err != nil {
		s.fail(ctx, err)
		return
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(body)))
	bctx, cancel := context.WithTimeout(ctx, requestTimeout)
	got, err := client.Do(bctx, s.nc, &nats.Msg{Subject: "soak.bare", Data: n[:]})
	cancel()
	bare := time.Since(b0)
	if err != nil || len(got) != len(body) {
		s.fail(ctx, fmt.Errorf("bare request of %d bytes: %d bytes, %v", len(body), len(got), err))
		return
	}
	s.mu.Lock()
	s.bareLat = append(s.bareLat, bare)
	s.mu.Unlock()
}

// check compares a reply with what the agent published: its seq at or
// past min_seq (no other publisher writes the session: exactly it), its
// message count that of the agent's projection, and every CheckEvery
// turns its messages with that projection's, one by one.
func (s *soak) check(ss *soakSession, reply []byte, minSeq uint64) error {
	seq, n, err := replyHead(reply)
	if err != nil {
		return fmt.Errorf("%s at min_seq %d: %w", ss.name, minSeq, err)
	}
	if seq < minSeq {
		return fmt.Errorf("%s: reply seq %d below min_seq %d", ss.name, seq, minSeq)
	}
	want := ss.proj.Messages()
	if n != len(want) {
		return fmt.Errorf("%s at seq %d: reply of %d messages, the agent's records make %d", ss.name, seq, n, len(want))
	}
	if ss.turns%s.cfg.CheckEvery != 0 {
		return nil
	}
	v, err := record.Decoder{ShareInput: true, MaxBytes: len(reply) + 1}.Decode(reply)
	if err != nil {
		return fmt.Errorf("%s at seq %d: decode reply: %w", ss.name, seq, err)
	}
	msgs, _ := v.Get("messages")
	got, _ := msgs.([]any)
	for i := range want {
		if !record.Equal(got[i], want[i]) {
			a, _ := record.MarshalJSON(got[i])
			b, _ := record.MarshalJSON(want[i])
			return fmt.Errorf("%s at seq %d: message %d is %.300s, the agent's records make %.300s", ss.name, seq, i, a, b)
		}
	}
	s.checked.Add(1)
	return nil
}

// fail counts an error, keeping the first few. A turn the end of the
// load cut short is none.
func (s *soak) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs++
	if len(s.first) < 5 {
		s.first = append(s.first, err.Error())
	}
}

// window takes the latencies gathered since the last window.
func (s *soak) window(from, to, start time.Time) SoakWindow {
	s.mu.Lock()
	turn, bare, replies, sent, records, errs := s.turn, s.bareLat, s.replies, s.sent, s.records, s.errs
	s.turn, s.bareLat, s.replies, s.sent, s.records = nil, nil, nil, nil, nil
	s.mu.Unlock()
	slices.Sort(turn)
	slices.Sort(bare)
	slices.Sort(replies)
	slices.Sort(sent)
	slices.Sort(records)
	w := SoakWindow{
		Name:   fmt.Sprintf("%d-%ds", int(from.Sub(start).Round(time.Second).Seconds()), int(to.Sub(start).Round(time.Second).Seconds())),
		Turns:  len(turn),
		Turn50: percentile(turn, .5), Turn99: percentile(turn, .99),
		Bare50: percentile(bare, .5), Bare99: percentile(bare, .99),
		Took: to.Sub(from),
	}
	if len(replies) > 0 {
		w.ReplyBytes = int64(replies[len(replies)/2])
		w.SentBytes = int64(sent[len(sent)/2])
		w.RecordBytes = int64(records[len(records)/2])
	}
	s.mu.Lock()
	w.Errors, s.errsSeen = errs-s.errsSeen, errs
	s.mu.Unlock()
	return w
}

// sample fills in the process's memory, the cache, the data directory's
// size and the load average.
func (s *soak) sample(ctx context.Context, w *SoakWindow, pid int, metrics, data string) {
	w.RSS = procRSS(pid)
	m := scrape(ctx, metrics)
	w.HeapInUse = int64(m["go_memstats_heap_inuse_bytes"])
	w.CacheBytes = int64(m["ctxd_sessions_loaded_bytes"])
	_ = filepath.WalkDir(data, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				w.Disk += fi.Size()
			}
		}
		return nil
	})
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		w.Load1, _ = strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	}
}

// procRSS reads a process's resident set from /proc (Linux); 0 where
// there is none.
func procRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// scrape reads the unlabelled samples of a Prometheus text page.
func scrape(ctx context.Context, url string) map[string]float64 {
	out := map[string]float64{}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return out
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, "{") {
			continue
		}
		if name, val, ok := strings.Cut(line, " "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
				out[name] = v
			}
		}
	}
	return out
}

// readyURL waits for ctxd serve's "ctxd ready URL" line.
func readyURL(out io.Reader, exited <-chan struct{}) (string, error) {
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "ctxd ready "); ok {
				lines <- u
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case u := <-lines:
		return u, nil
	case <-exited:
		return "", errors.New("exited before it was ready")
	case <-time.After(2 * time.Minute):
		return "", errors.New("not ready within 2 minutes")
	}
}

// freeAddr returns a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
