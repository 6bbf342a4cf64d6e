//go:build !slow

package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/streams"
)

var (
	coldSessions = flag.Int("coldstart.sessions", 1000, "BenchmarkColdStart: sessions in the stream (-short: 100)")
	coldPer      = flag.Int("coldstart.records", 200, "BenchmarkColdStart: records of each session, interleaved")
	coldProcess  = flag.Bool("coldstart.process", false, "BenchmarkColdStart: restart ctxd as a process of the built binary, not in the test process")
	coldReader   = flag.Bool("coldstart.reader", false, "BenchmarkColdStart: after the restart, answer with a ctxd process that does not ingest (a non-owner that never saw the sessions), on the store's server run by the test")
)

// BenchmarkColdStart measures the first request for each session after
// ctxd and its embedded server restart, on a file store holding
// sessions x records records, the sessions interleaved (1 000 x 200 by
// default, 100 x 200 with -short). Every session is fetched once, as a
// runtime fetches its context every turn; then ctxd stops, writing every
// session's checkpoint, with its record index, and its snapshot, as it
// does at shutdown; then, with the server alone, the sessions are split
// three ways: one in three keeps its snapshot (loads from it), one in
// three loses it (loads by its checkpoint's index), and one in three
// loses it and its index too (the format written before indexes: the
// baseline, a load scanning the subject). After the restart the
// sessions are fetched once each, the three kinds in turn, each followed
// by a second fetch (warm). It prints p50, p99 and worst of each.
//
// The restart is ctxd in the test process (app.Open on the same
// directory), or with -coldstart.process a new ctxd process, as a real
// restart is: a process whose heap starts empty. With -coldstart.reader
// the test runs the server alone on the directory and the requests are
// answered by a new ctxd process that does not ingest: an instance that
// never saw the sessions and is not their owner.
//
//	go test ./integration -run '^$' -bench ColdStart -benchtime 1x
//	go test ./integration -run '^$' -bench ColdStart -benchtime 1x -coldstart.process
//	go test ./integration -run '^$' -bench ColdStart -benchtime 1x -coldstart.reader
func BenchmarkColdStart(b *testing.B) {
	sessions, per := *coldSessions, *coldPer
	if testing.Short() {
		sessions = min(sessions, 100)
	}
	dir := b.TempDir()
	ctx := context.Background()

	a := startAppWith(b, dir, func(*app.Config) {})
	nc, err := nats.Connect(a.URL())
	require.NoError(b, err)
	js, err := bus.JetStream(nc)
	require.NoError(b, err)
	t0 := time.Now()
	last := fillStream(b, js, sessions, per)
	_, err = ctxdclient.Context(ctx, nc, "s0", ctxdclient.Request{MinSeq: last, WaitMS: 120000})
	require.NoError(b, err)
	b.Logf("%d records over %d sessions published and applied in %v", last, sessions, time.Since(t0).Round(time.Millisecond))
	// Every session fetched once, as an agent's runtime fetches its
	// context every turn: the sessions in use are held in memory, and
	// those are the ones a shutdown writes snapshots of.
	for s := range sessions {
		_, err := ctxdclient.Context(ctx, nc, fmt.Sprintf("s%d", s), ctxdclient.Request{})
		require.NoError(b, err)
	}
	nc.Close()
	t0 = time.Now()
	require.NoError(b, a.Close()) // writes every checkpoint and snapshot
	b.Logf("shutdown: %v", time.Since(t0).Round(time.Millisecond))

	// Three kinds: by snapshot, by index, scanning (the baseline).
	ns := natsd.New(dir)
	ns.Port = -1
	require.NoError(b, ns.Open())
	nc, err = nats.Connect(ns.ClientURL())
	require.NoError(b, err)
	js, err = bus.JetStream(nc)
	require.NoError(b, err)
	cps, err := bus.OpenCheckpoints(ctx, js, 0)
	require.NoError(b, err)
	// Written as ctxd writes them, naming the stream: one that names
	// none is not trusted.
	st, err := js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(b, err)
	cps.Stream = bus.StreamIdentity(st.CachedInfo())
	snaps, err := bus.OpenSnapshots(ctx, js, 0)
	require.NoError(b, err)
	kv, err := js.KeyValue(ctx, streams.SnapshotsBucket)
	require.NoError(b, err)
	indexed, cpBytes, snapped, snapBytes := 0, 0, 0, 0
	for s := range sessions {
		id := fmt.Sprintf("s%d", s)
		cp, ok, err := cps.Get(ctx, id)
		require.NoError(b, err)
		require.True(b, ok, "%s has a checkpoint", id)
		seqs, err := cp.Seqs()
		require.NoError(b, err)
		if len(seqs) == per {
			indexed++
		}
		data, err := json.Marshal(cp)
		require.NoError(b, err)
		cpBytes += len(data)
		data, ok, err = snaps.Get(ctx, id)
		require.NoError(b, err)
		if ok {
			snapped++
			snapBytes += len(data)
		}
		if s%3 != 0 {
			require.NoError(b, kv.Delete(ctx, id))
		}
		if s%3 == 2 {
			require.NoError(b, cps.Put(ctx, id, cp.WithoutIndex()))
		}
	}
	nc.Close()
	require.NoError(b, ns.Close())
	require.Equal(b, sessions, indexed, "every session's checkpoint lists its records")
	require.Equal(b, sessions, snapped, "every session has a snapshot")
	b.Logf("checkpoints with their index: %d bytes on average; snapshots: %d bytes on average", cpBytes/sessions, snapBytes/sessions)
	blocks, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "TRANSCRIPTS", "msgs", "*.blk"))
	require.NoError(b, err)
	var bytes int64
	for _, f := range blocks {
		fi, err := os.Stat(f)
		require.NoError(b, err)
		bytes += fi.Size()
	}
	b.Logf("the stream: %d message blocks, %.1f MB", len(blocks), float64(bytes)/1e6)

	var snap, cold, scan, warm []time.Duration
	replyBytes := 0
	// The embedded server holds the message blocks it loaded for reads
	// through weak pointers: a GC cycle of this process (ctxd's, in
	// production) frees them, and the next load loads them again. The
	// first requests are told apart by whether a cycle ran since the
	// fetch before them.
	var afterGC, noGC []time.Duration
	gcCycles := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	cycles := func() uint64 { metrics.Read(gcCycles); return gcCycles[0].Value.Uint64() }
	var firstGC, gcSeen uint64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		var a *app.App
		var p *proc
		var ns *natsd.Server
		url := ""
		if *coldReader {
			// The server alone, and ctxd beside it: with no record
			// published, JetStream pins the ingest to no one, and every
			// request is answered as a non-owner answers, from the stream.
			ns = natsd.New(dir)
			ns.Port = -1
			require.NoError(b, ns.Open())
			p = startProcess(b, "--nats", ns.ClientURL())
			url = ns.ClientURL()
		} else if *coldProcess {
			p = startProcess(b, "--port", "-1", "--data", dir)
			url = p.url
		} else {
			a = startAppWith(b, dir, func(*app.Config) {})
			url = a.URL()
		}
		nc, err := nats.Connect(url)
		require.NoError(b, err)
		b.StartTimer()
		firstGC, gcSeen = cycles(), cycles()
		// Triples of sessions, one of each kind, in an order that
		// spreads them over the stream; which goes first turns.
		for i := range sessions / 3 {
			k := (i * 7919) % (sessions / 3)
			triple := []int{3 * k, 3*k + 1, 3*k + 2}
			for range i % 3 {
				triple = append(triple[1:], triple[0])
			}
			for _, s := range triple {
				id := fmt.Sprintf("s%d", s)
				t0 := time.Now()
				data, err := ctxdclient.Context(ctx, nc, id, ctxdclient.Request{})
				d := time.Since(t0)
				require.NoError(b, err)
				require.Greater(b, len(data), 1000)
				replyBytes += len(data)
				switch s % 3 {
				case 0:
					snap = append(snap, d)
					if n := cycles(); n != gcSeen {
						afterGC = append(afterGC, d)
					} else {
						noGC = append(noGC, d)
					}
				case 1:
					cold = append(cold, d)
				default:
					scan = append(scan, d)
				}
				t0 = time.Now()
				again, err := ctxdclient.Context(ctx, nc, id, ctxdclient.Request{})
				warm = append(warm, time.Since(t0))
				require.NoError(b, err)
				require.Equal(b, data, again)
				gcSeen = cycles()
			}
		}
		b.StopTimer()
		nc.Close()
		if p != nil {
			require.NoError(b, p.cmd.Process.Signal(syscall.SIGTERM))
			require.NoError(b, p.wait(b))
		} else {
			require.NoError(b, a.Close())
		}
		if ns != nil {
			require.NoError(b, ns.Close())
		}
		b.StartTimer()
	}
	b.StopTimer()
	if *coldProcess || *coldReader {
		afterGC, noGC = nil, nil // ctxd's GC cycles are its process's
	} else {
		b.Logf("GC cycles while fetching (last run): %d", cycles()-firstGC)
	}
	row := func(name string, d []time.Duration) {
		s := slices.Clone(d)
		slices.Sort(s)
		p50, p99, worst := s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)], s[len(s)-1]
		b.Logf("%-44s n=%4d  p50 %8.2f ms  p99 %8.2f ms  worst %8.2f ms", name, len(s), ms(p50), ms(p99), ms(worst))
		b.ReportMetric(ms(p50), name+"-p50-ms")
		b.ReportMetric(ms(p99), name+"-p99-ms")
		b.ReportMetric(ms(worst), name+"-worst-ms")
	}
	if len(cold) > 8 {
		b.Logf("first cold requests, in order: by snapshot %v, indexed %v, scanning %v", snap[:8], cold[:8], scan[:8])
	}
	b.Logf("first request after a restart, %d-record sessions in a %d-record stream of %d sessions:", per, last, sessions)
	b.Logf("replies: %d bytes on average", replyBytes/(len(snap)+len(cold)+len(scan)))
	row("cold-snapshot", snap)
	row("cold", cold)
	if len(afterGC) > 0 && len(noGC) > 0 {
		row("cold-snapshot-after-gc", afterGC)
		row("cold-snapshot-no-gc", noGC)
	}
	row("cold-scan", scan)
	row("warm", warm)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
