//go:build slow

package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/streams"
)

var partitionKills = flag.Int("partition.kills", 20, "runs of TestPartition_KilledAtRandom, each with a SIGKILL of ctxd partition at a random moment (-short: 5 at most; make partition-kills: 100)")

// sessionRecords are the records of each session, as published.
type sessionRecords map[string][]projection.Record

// seedUnpartitioned fills the TRANSCRIPTS stream of an unpartitioned
// embedded store in dir: 15 records of alpha, 4 of beta, interleaved.
func seedUnpartitioned(t testing.TB, dir string) sessionRecords {
	t.Helper()
	srv := natsd.New(dir)
	srv.Port = -1
	require.NoError(t, srv.Open())
	defer srv.Close()
	c := newClient(t, srv.ClientURL())
	defer c.nc.Close()
	def, err := streams.Transcripts()
	require.NoError(t, err)
	_, err = bus.EnsureStream(t.Context(), c.js, def)
	require.NoError(t, err)
	recs := sessionRecords{}
	for i := range 19 {
		s := "alpha"
		if i%5 == 2 {
			s = "beta"
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		v := record.NewMap("role", role, "content", fmt.Sprintf("%s %d", s, i))
		recs[s] = append(recs[s], projection.Record{Seq: c.publishValue(s, v, false), Value: v})
	}
	return recs
}

// layoutState says what a store's TRANSCRIPTS stream is, read without
// ctxd's checks: "unpartitioned", "partitioned" (every record on
// transcripts.<session> at or before ctxd_partitioned_after), "half"
// (the transform, and such a record past it: ctxd would not read it), or
// "missing" (the server does not load it; what it logged is logged);
// with " (put back)" when the open put back a configuration kept aside
// by a ctxd partition killed during its update (natsd.KeepStreamConfig).
func layoutState(t testing.TB, dir string) (state string) {
	t.Helper()
	srv := natsd.New(dir)
	srv.Port = -1
	var logs syncWriter
	logs.b = &strings.Builder{}
	srv.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	require.NoError(t, srv.Open())
	defer srv.Close()
	defer func() {
		if strings.Contains(logs.String(), "put back") {
			state += " (put back)"
		}
	}()
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(t.Context(), "TRANSCRIPTS")
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Logf("the server does not load the stream: %s", logs.String())
		return "missing"
	}
	require.NoError(t, err)
	p, after, err := streams.PartitionsOf(st.CachedInfo().Config)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	if p == 1 {
		return "unpartitioned"
	}
	m, err := st.GetLastMsgForSubject(t.Context(), "transcripts.*")
	if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence <= after {
		return "partitioned"
	}
	require.NoError(t, err)
	return "half"
}

// checkReplies asks a ctxd serve for every session, with min_seq its last
// record and without, and counts the replies that are wrong: a reply
// must be Build over the session's records up to its seq, with seq at
// or past min_seq, and without min_seq every record (none is published
// meanwhile).
func checkReplies(t testing.TB, url string, recs sessionRecords) (wrong int) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	for s, rs := range recs {
		last := rs[len(rs)-1].Seq
		for _, minSeq := range []uint64{last, 0} {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			data, err := ctxdclient.Context(ctx, nc, s, ctxdclient.Request{MinSeq: minSeq, WaitMS: 10000})
			cancel()
			if err != nil {
				t.Logf("%s (min_seq %d): an error, not a wrong reply: %v", s, minSeq, err)
				continue
			}
			r := decodeReply(t, data)
			var upTo []projection.Record
			for _, rec := range rs {
				if rec.Seq <= r.Seq {
					upTo = append(upTo, rec)
				}
			}
			want := projection.Build(upTo, projection.Options{})
			if r.Seq < last || !record.Equal(want.Messages, r.Messages) {
				t.Errorf("%s (min_seq %d): a wrong reply: seq %d (last record %d), %d messages (Build of the records up to it: %d)", s, minSeq, r.Seq, last, len(r.Messages), len(want.Messages))
				wrong++
			}
		}
	}
	return wrong
}

// serveAndCheck runs ctxd serve on the store in dir: it either refuses to
// start, saying which command finishes the stream's partitioning, or
// serves only right replies. It reports whether it served.
func serveAndCheck(t testing.TB, dir string, recs sessionRecords, wrong *int) bool {
	t.Helper()
	p, err := tryProcess(t, "--port", "-1", "--data", dir)
	if err != nil {
		if !strings.Contains(err.Error(), "ctxd partition --data "+dir+" --partitions 4") {
			t.Errorf("a refusal that does not name the command that finishes the partitioning: %v", err)
		}
		return false
	}
	*wrong += checkReplies(t, p.url, recs)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.wait(t), "stderr: %s", p.stderr)
	return true
}

// TestPartition_KilledAtRandom: ctxd partition --data D --partitions 4
// is SIGKILLed at a random moment of its run, over and over, each time on
// a fresh copy of a store with records. Whatever it left, ctxd serve
// either refuses it, naming the command that finishes it, or answers
// every request right; ctxd partition run again exits 0 and finishes it,
// and ctxd serve then answers right. The states left are counted.
func TestPartition_KilledAtRandom(t *testing.T) {
	bin := ctxdBinary(t)
	seed := t.TempDir()
	recs := seedUnpartitioned(t, seed)
	copyStore := func() string {
		dir := t.TempDir()
		require.NoError(t, os.CopyFS(dir, os.DirFS(seed)))
		return dir
	}
	// How long a run takes, at the quickest: the kills fall anywhere in
	// it, and a few after it.
	full := time.Hour
	for range 5 {
		dir := copyStore()
		start := time.Now()
		out, err := exec.Command(bin, "partition", "--data", dir, "--partitions", "4").CombinedOutput()
		require.NoError(t, err, "%s", out)
		full = min(full, time.Since(start))
	}
	rngSeed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(rngSeed, 23))
	t.Logf("one run of ctxd partition: %v at the quickest; kills in [0, %v); seed %d", full.Round(time.Millisecond), full.Round(time.Millisecond), rngSeed)

	runs := *partitionKills
	if testing.Short() {
		runs = min(runs, 5)
	}
	left := map[string]int{}
	var refused, served, wrong, finishedFirst int
	for i := range runs {
		dir := copyStore()
		delay := time.Duration(rng.Int64N(int64(full)))
		cmd := exec.Command(bin, "partition", "--data", dir, "--partitions", "4")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, "run %d: %s", i, out.String())
			finishedFirst++
		case <-time.After(delay):
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				require.ErrorIs(t, err, os.ErrProcessDone)
			}
			if err := <-done; err == nil {
				finishedFirst++
			}
		}
		state := layoutState(t, dir)
		left[state]++
		if serveAndCheck(t, dir, recs, &wrong) {
			served++
		} else {
			refused++
			if !strings.HasPrefix(state, "half") {
				t.Errorf("run %d: ctxd serve refused a store left %s", i, state)
			}
		}

		again, err := exec.Command(bin, "partition", "--data", dir, "--partitions", "4").CombinedOutput()
		if err != nil {
			t.Errorf("run %d (left %s): ctxd partition again: %v: %s", i, state, err, again)
			continue
		}
		if now := layoutState(t, dir); now != "partitioned" {
			t.Errorf("run %d (left %s): after ctxd partition again: %s", i, state, now)
			continue
		}
		if !serveAndCheck(t, dir, recs, &wrong) {
			t.Errorf("run %d (left %s): ctxd serve refused after ctxd partition again", i, state)
		}
	}
	t.Logf("%d runs (%d finished before the kill): left %v; ctxd serve refused %d, served %d; wrong replies: %d",
		runs, finishedFirst, left, refused, served, wrong)
	require.Zero(t, wrong, "wrong replies")
}

// A stream left half partitioned (here as the two stream updates of an
// earlier ctxd partition leave it when it is killed between them: the
// transform, without the metadata that says where the older records end)
// is refused by ctxd serve, ctxd rebuild and ctxd import with an error
// that names the command that finishes it; ctxd partition run again
// finishes it, and then every record is served.
func TestPartition_HalfDoneIsRefusedAndFinished(t *testing.T) {
	url := natstest.Start(t)
	c := newClient(t, url)
	def, err := streams.Transcripts()
	require.NoError(t, err)
	st, err := bus.EnsureStream(t.Context(), c.js, def)
	require.NoError(t, err)
	recs := sessionRecords{}
	for i := range 15 {
		v := record.NewMap("role", "user", "content", fmt.Sprintf("m%d", i))
		recs["alpha"] = append(recs["alpha"], projection.Record{Seq: c.publishValue("alpha", v, false), Value: v})
	}
	cfg := st.CachedInfo().Config
	cfg.SubjectTransform = streams.PartitionTransform(4)
	_, err = c.js.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)

	a := app.New(func() app.Config {
		cfg := app.DefaultConfig()
		cfg.NATSURL = url
		return cfg
	}())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = a.Open(ctx)
	if err == nil {
		wrong := checkReplies(t, url, recs)
		a.Close()
		t.Fatalf("ctxd serves a half partitioned stream (%d wrong replies)", wrong)
	}
	require.ErrorContains(t, err, "ctxd partition --partitions 4")

	bin := ctxdBinary(t)
	out, err := exec.Command(bin, "rebuild", "--session", "alpha", "--nats", url).CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "ctxd partition --partitions 4")
	out, err = exec.Command(bin, "rebuild", "--check", "--nats", url).CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "ctxd partition --partitions 4")

	out, err = exec.Command(bin, "partition", "--partitions", "4", "--nats", url).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("ctxd partition: %s", strings.TrimSpace(string(out)))
	startApp(t, t.TempDir(), func(c *app.Config) { c.NATSURL = url })
	require.Zero(t, checkReplies(t, url, recs))
	v := record.NewMap("role", "assistant", "content", "after")
	recs["alpha"] = append(recs["alpha"], projection.Record{Seq: c.publishValue("alpha", v, false), Value: v})
	require.Zero(t, checkReplies(t, url, recs))
}

// TestPartition_KilledAtRandomWhilePublishing: ctxd partition --nats URL
// --partitions 4 on a running server is SIGKILLed at a random moment
// while publishers keep publishing, so that records land between its
// read of the last sequence and its update (the stream is then left
// half partitioned when the kill comes before the metadata is raised
// over them). Whatever it left, a ctxd either refuses to start, naming
// the command that finishes it, or answers every request right; ctxd
// partition run again finishes it, and a ctxd then answers right.
func TestPartition_KilledAtRandomWhilePublishing(t *testing.T) {
	bin := ctxdBinary(t)
	runs := *partitionKills
	if testing.Short() {
		runs = min(runs, 5)
	}
	// setup makes a server with a stream of records, and publishers that
	// go on until stop is called, which returns every record acknowledged.
	setup := func(t *testing.T) (url string, stop func() sessionRecords) {
		url = natstest.Start(t)
		c := newClient(t, url)
		def, err := streams.Transcripts()
		require.NoError(t, err)
		_, err = bus.EnsureStream(t.Context(), c.js, def)
		require.NoError(t, err)
		recs := sessionRecords{}
		publish := func(s string, i int) error {
			v := record.NewMap("role", "user", "content", fmt.Sprintf("%s %d", s, i))
			data, err := record.MarshalJSON(v)
			require.NoError(t, err)
			ack, err := c.js.Publish(t.Context(), "transcripts."+s, data)
			if err == nil {
				recs[s] = append(recs[s], projection.Record{Seq: ack.Sequence, Value: v})
			}
			return err
		}
		for i := range 10 {
			require.NoError(t, publish([]string{"alpha", "beta"}[i%2], i))
		}
		quit, done := make(chan struct{}), make(chan error)
		go func() {
			for i := 10; ; i++ {
				select {
				case <-quit:
					done <- nil
					return
				default:
				}
				if err := publish([]string{"alpha", "beta"}[i%2], i); err != nil {
					done <- err
					return
				}
			}
		}()
		return url, func() sessionRecords {
			close(quit)
			require.NoError(t, <-done)
			return recs
		}
	}
	partition := func(url string) *exec.Cmd {
		return exec.Command(bin, "partition", "--nats", url, "--partitions", "4")
	}
	// serve starts a ctxd on url: refused (only a half partitioned
	// stream, naming the command) or answering right.
	serve := func(t *testing.T, url string, recs sessionRecords, wrong *int) bool {
		cfg := app.DefaultConfig()
		cfg.NATSURL = url
		a := app.New(cfg)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if err := a.Open(ctx); err != nil {
			var ue *bus.UnfinishedError
			require.ErrorAs(t, err, &ue)
			require.ErrorContains(t, err, "ctxd partition --partitions 4")
			return false
		}
		defer a.Close()
		*wrong += checkReplies(t, url, recs)
		return true
	}
	state := func(t *testing.T, url string) string {
		nc := natstest.Connect(t, url)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		st, err := js.Stream(t.Context(), "TRANSCRIPTS")
		require.NoError(t, err)
		l, err := bus.LayoutOf(st.CachedInfo().Config)
		require.NoError(t, err)
		if !l.Partitioned() {
			return "unpartitioned"
		}
		m, err := st.GetLastMsgForSubject(t.Context(), "transcripts.*")
		if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Sequence <= l.After {
			return "partitioned"
		}
		require.NoError(t, err)
		return "half"
	}

	// How long a run takes, at the quickest.
	full := time.Hour
	for range 3 {
		url, stop := setup(t)
		start := time.Now()
		out, err := partition(url).CombinedOutput()
		require.NoError(t, err, "%s", out)
		full = min(full, time.Since(start))
		stop()
	}
	rngSeed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(rngSeed, 29))
	t.Logf("one run of ctxd partition: %v at the quickest; kills in [0, %v); seed %d", full.Round(time.Millisecond), full.Round(time.Millisecond), rngSeed)

	left := map[string]int{}
	var refused, served, wrong int
	for i := range runs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			url, stop := setup(t)
			cmd := partition(url)
			require.NoError(t, cmd.Start())
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(time.Duration(rng.Int64N(int64(full)))):
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					require.ErrorIs(t, err, os.ErrProcessDone)
				}
				<-done
			}
			recs := stop()
			s := state(t, url)
			if serve(t, url, recs, &wrong) {
				served++
			} else {
				refused++
				// The killed command's last request (a stream update)
				// may reach the server after the state was read, and
				// after ctxd read it too: the server takes a JetStream
				// API request in its own time, even from a connection
				// gone. A stream that reads as partitioned now was half
				// partitioned when ctxd read it, its last update landing
				// since (ctxd serves a partitioned stream: checked below,
				// after ctxd partition runs again).
				if s = state(t, url); s == "partitioned" {
					t.Logf("refused a stream that its killed command's last update finished since")
					s = "half"
				}
				require.Equal(t, "half", s, "only a half partitioned stream is refused")
			}
			left[s]++
			out, err := partition(url).CombinedOutput()
			require.NoError(t, err, "ctxd partition again: %s", out)
			require.Equal(t, "partitioned", state(t, url))
			require.True(t, serve(t, url, recs, &wrong), "served once ctxd partition ran again")
		})
	}
	t.Logf("%d runs: left %v; ctxd refused %d, served %d; wrong replies: %d", runs, left, refused, served, wrong)
	require.Zero(t, wrong, "wrong replies")
}
