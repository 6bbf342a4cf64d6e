//go:build !slow

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/internal/workload"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/streams"
)

// snapshotKeys returns the sessions the snapshot bucket holds a
// snapshot of.
func snapshotKeys(t *testing.T, js jetstream.JetStream) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.SnapshotsBucket)
	require.NoError(t, err)
	keys, err := kv.ListKeys(ctx)
	require.NoError(t, err)
	out := map[string]bool{}
	for k := range keys.Keys() {
		if k != "ctxd.state" {
			out[k] = true
		}
	}
	return out
}

// publishSessions publishes generated sessions (tool calls, screenshots,
// compactions), interleaved, and returns the last sequence.
func publishSessions(c *client, ids []string, per int, seed uint64) uint64 {
	gens := map[string][]any{}
	for i, id := range ids {
		gens[id] = workload.New(seed+uint64(i), workload.Default.WithScreenshots(2000, 7)).Records(per)
	}
	var last uint64
	for k := range per {
		for _, id := range ids {
			if k < len(gens[id]) {
				last = c.publishValue(id, gens[id][k], false)
			}
		}
	}
	return last
}

// After a clean stop ctxd has written a snapshot of every session it
// held; after a restart, on the same server, each session's first
// request loads from its snapshot, and every reply, then and after more
// records, equals Build of the session's records.
func TestRestart_LoadsBySnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := natstest.Start(t)
	dir := t.TempDir()
	a := startApp(t, dir, func(c *app.Config) { c.NATSURL = url })
	c := newClient(t, url)
	ids := []string{"r0", "r1", "r2", "r3", "r4", "r5"}
	last := publishSessions(c, ids, 60, 11)
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	for _, id := range ids {
		c.fetchChecked(id, "before", 0)
	}
	require.NoError(t, a.Close())
	require.Len(t, snapshotKeys(t, c.js), len(ids), "a snapshot of every session held")

	for round := range 2 {
		a = startApp(t, dir, func(c *app.Config) { c.NATSURL = url })
		before := a.Stats().SnapshotLoads
		for _, id := range ids {
			c.fetchChecked(id, fmt.Sprintf("restart %d", round), 0)
		}
		require.Equal(t, before+uint64(len(ids)), a.Stats().SnapshotLoads, "round %d: every first load from a snapshot", round)
		// More records: applied to the projection restored.
		last = publishSessions(c, ids, 9, 100+uint64(round))
		require.NoError(t, a.Wait(ctx, last, 30*time.Second))
		for _, id := range ids {
			c.fetchChecked(id, fmt.Sprintf("after restart %d", round), 0)
		}
		require.NoError(t, a.Close())
	}
}

// Records removed while ctxd is stopped: the snapshots, written before,
// are emptied at the next start (they may hold what was removed), and
// the replies equal Build of what the stream still holds. A removal
// while ctxd runs empties them too.
func TestRestart_SnapshotsGoWithRemovals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := natstest.Start(t)
	dir := t.TempDir()
	a := startApp(t, dir, func(c *app.Config) { c.NATSURL = url })
	c := newClient(t, url)
	ids := []string{"q0", "q1", "q2"}
	last := publishSessions(c, ids, 30, 21)
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	for _, id := range ids {
		c.fetchChecked(id, "before", 0)
	}
	require.NoError(t, a.Close())
	require.Len(t, snapshotKeys(t, c.js), len(ids))

	st, err := c.js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	require.NoError(t, st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.q1")))
	a = startApp(t, dir, func(c *app.Config) { c.NATSURL = url })
	require.Empty(t, snapshotKeys(t, c.js), "emptied at start")
	// A record pins the ingest to the instance: its store writes
	// snapshots at shutdown.
	last = c.publishValue("q0", record.NewMap("role", "user", "content", "q0 after"), false)
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	for _, id := range ids {
		c.fetchChecked(id, "after the purge", 0)
	}
	require.Zero(t, a.Stats().SnapshotLoads)
	require.NoError(t, a.Close())
	require.Len(t, snapshotKeys(t, c.js), 2, "written again, of what the stream holds")

	a = startApp(t, dir, func(c *app.Config) { c.NATSURL = url })
	last = c.publishValue("q1", record.NewMap("role", "user", "content", "q1 again"), false)
	require.NoError(t, a.Wait(ctx, last, 30*time.Second))
	c.fetchChecked("q0", "running", 0)
	require.NoError(t, st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.q2")))
	require.Eventually(t, func() bool { return len(snapshotKeys(t, c.js)) == 0 }, 20*time.Second, 50*time.Millisecond,
		"emptied after a removal while running")
	for _, id := range ids {
		c.fetchChecked(id, "after the second purge", 0)
	}
	require.NoError(t, a.Close())
}

// snapshotLoads asks ctxd at url for its count of loads from snapshots.
func snapshotLoads(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	m, err := nc.Request("$SRV.STATS.ctxd", nil, 5*time.Second)
	require.NoError(t, err)
	var reply struct {
		Endpoints []struct {
			Name string `json:"name"`
			Data struct {
				SnapshotLoads uint64 `json:"snapshot_loads"`
			} `json:"data"`
		} `json:"endpoints"`
	}
	require.NoError(t, json.Unmarshal(m.Data, &reply))
	for _, e := range reply.Endpoints {
		if e.Name == "context" {
			return e.Data.SnapshotLoads
		}
	}
	t.Fatalf("no context endpoint in %s", m.Data)
	return 0
}

// ctxd killed (SIGKILL) after its sessions paused: the snapshots written
// behind the ingest of the idle sessions are what the restarted process
// loads from, the replies equal Build of the sessions' records, those
// published after the snapshots included.
func TestProcess_CrashLoadsByIdleSnapshots(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, "--port", "-1", "--data", dir, "--idle-snapshots", "1s")
	c := newClient(t, p.url)
	ids := []string{"k0", "k1", "k2", "k3"}
	last := publishSessions(c, ids, 40, 31)
	c.fetchChecked(ids[0], "before", last) // the ingest has applied them all
	for _, id := range ids[1:] {
		c.fetchChecked(id, "before", 0)
	}
	require.Eventually(t, func() bool { return len(snapshotKeys(t, c.js)) == len(ids) }, 30*time.Second, 50*time.Millisecond,
		"the idle sessions' snapshots written behind the ingest")
	// One session goes on after its snapshot (an idle round writes it
	// again only after a round without records: 2 s from now at the
	// earliest, long after the kill).
	c.publishValue("k1", record.NewMap("role", "user", "content", "k1 after its snapshot"), false)
	c.fetchChecked("k1", "after", 0)
	require.NoError(t, p.cmd.Process.Kill())
	<-p.done
	c.nc.Close()

	p = startProcess(t, "--port", "-1", "--data", dir, "--idle-snapshots", "1s")
	c = newClient(t, p.url)
	for _, id := range ids {
		c.fetchChecked(id, "restarted", 0)
	}
	require.Equal(t, uint64(len(ids)), snapshotLoads(t, c.nc), "every first load from a snapshot")
}

// A record removed just before an instance stops: the snapshots it
// writes at shutdown either hold the removal or are never used. (The partitions' stores leave the removal watcher when they are
// handed back; a snapshot labelled with a removal count taken after that
// could hold a record the count says is gone, and be served.)
func TestRestart_SnapshotsAfterARemovalAtClose(t *testing.T) {
	for _, partitions := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d partitions", partitions), func(t *testing.T) {
			removalAtClose(t, partitions)
		})
	}
}

func removalAtClose(t *testing.T, partitions int) {
	url := natstest.Start(t)
	dir := t.TempDir()
	config := func(c *app.Config) { c.NATSURL = url; c.Partitions = partitions }
	c := newClient(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for round := range 5 {
		a := startApp(t, dir, config)
		session := fmt.Sprintf("gone%d", round)
		var seqs []uint64
		for i := range 8 {
			seqs = append(seqs, c.publishValue(session, record.NewMap("role", "user", "content", fmt.Sprintf("m%d", i)), false))
		}
		// Applied by the partition's ingest and loaded in its store.
		require.Len(t, c.fetchSeq(session, seqs[len(seqs)-1], false).Messages, 8)
		st, err := c.js.Stream(ctx, "TRANSCRIPTS")
		require.NoError(t, err)
		require.NoError(t, st.DeleteMsg(ctx, seqs[3]))
		require.NoError(t, a.Close())

		a = startApp(t, dir, config)
		msgs := c.fetchSeq(session, seqs[len(seqs)-1], false).Messages
		require.Len(t, msgs, 7, "round %d: the removed record is not served: %v", round, msgs)
		for _, m := range msgs {
			content, _ := m.(*record.Map).String("content")
			require.NotEqual(t, "m3", content, "round %d", round)
		}
		require.NoError(t, a.Close())
	}
}
