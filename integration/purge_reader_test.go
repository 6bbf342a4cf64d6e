package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/bus"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/pkg/record"
	"github.com/ctxd/ctxd/streams"
)

// An instance that does not hold the ingest pin answers through the
// stream: it reads a cached session's records after those it holds
// (the reader path). A removal after which no record is stored leaves
// the stream's last sequence where an earlier check verified it; when
// its advisory has not come (here: ctxd's user may not subscribe to
// it), only the stream's count of removed sequences tells. These tests
// make every reply come from the reader path: the test holds the pin
// itself.

// untoldServer starts a nats-server on which the user ctxd may not
// subscribe to the API audit advisories, and op may do anything; it
// returns the client URL.
func untoldServer(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`accounts {
  T {
    jetstream: enabled
    users = [
      { user: ctxd, password: ctxd-pw, permissions: { subscribe: { allow: [">"], deny: ["$JS.EVENT.ADVISORY.>"] } } }
      { user: op, password: op-pw }
    ]
  }
}
`), 0o600))
	srv := natsd.New(filepath.Join(dir, "js"))
	srv.Port = -1
	srv.ConfigFile = conf
	require.NoError(t, srv.Open())
	t.Cleanup(func() { srv.Close() })
	return srv.ClientURL()
}

// opClient connects as the operator user of untoldServer.
func opClient(t testing.TB, url string) *client {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo("op", "op-pw"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &client{t: t, nc: nc, js: js}
}

// holdPin creates the stream and the ingest consumer as ctxd does, and
// pulls from the consumer's priority group until the test ends: the pin
// is the test's, so every ctxd instance started after answers through
// the stream.
func (c *client) holdPin() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	scfg, err := streams.Transcripts()
	require.NoError(c.t, err)
	st, err := bus.EnsureStream(ctx, c.js, scfg)
	require.NoError(c.t, err)
	ccfg, err := streams.Ingest()
	require.NoError(c.t, err)
	cons, err := bus.OpenConsumer(ctx, st, ccfg, 0)
	require.NoError(c.t, err)
	var got atomic.Bool
	cc, err := cons.Consume(func(jetstream.Msg) { got.Store(true) }, jetstream.PullPriorityGroup(streams.IngestGroup), jetstream.PullExpiry(bus.PullExpiry))
	require.NoError(c.t, err)
	c.t.Cleanup(cc.Stop)
	// The pin goes with the first record delivered.
	c.publishValue("pin", record.NewMap("role", "user", "content", "pin"), false)
	require.Eventually(c.t, func() bool {
		info, err := cons.Info(ctx)
		return got.Load() && err == nil && len(info.PriorityGroups) == 1 && info.PriorityGroups[0].PinnedClientID != ""
	}, 20*time.Second, 20*time.Millisecond, "the test's pull holds the pin")
}

// roles returns the roles the instances say they have in $SRV.STATS.
func (c *client) roles() map[string]int {
	c.t.Helper()
	inbox := nats.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	require.NoError(c.t, err)
	defer sub.Unsubscribe()
	require.NoError(c.t, c.nc.PublishRequest("$SRV.STATS.ctxd", inbox, nil))
	out := map[string]int{}
	for {
		m, err := sub.NextMsg(300 * time.Millisecond)
		if err != nil {
			return out
		}
		var reply struct {
			Endpoints []struct {
				Data instanceStats `json:"data"`
			} `json:"endpoints"`
		}
		require.NoError(c.t, json.Unmarshal(m.Data, &reply))
		require.NotEmpty(c.t, reply.Endpoints)
		out[reply.Endpoints[0].Data.Role]++
	}
}

// startReader starts one ctxd instance, as the user that is not told of
// removals, while the test holds the pin.
func startReader(t *testing.T, url string, configure ...func(*app.Config)) *app.App {
	t.Helper()
	return startApp(t, t.TempDir(), append([]func(*app.Config){func(c *app.Config) {
		c.NATSURL = url
		c.Instance = "reader"
		c.NATSOptions = []nats.Option{nats.UserInfo("ctxd", "ctxd-pw")}
	}}, configure...)...)
}

// TestOperator_PurgeBeforeReaderReads: records are removed from a
// session the reader has cached, after records it has not read yet,
// and nothing is stored after the removal; the stream's last sequence
// was verified before it. The next request reads the session's records
// after those cached: it must not serve the cached records beside those
// it reads, nor load the session from a compaction that is gone.
func TestOperator_PurgeBeforeReaderReads(t *testing.T) {
	msg := func(i int) any {
		return record.NewMap("role", []string{"user", "assistant"}[i%2], "content", fmt.Sprintf("m%d", i))
	}
	t.Run("caught_up", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		url := untoldServer(t)
		c := opClient(t, url)
		c.holdPin()
		startReader(t, url)
		var s1 []uint64
		for i := range 5 {
			s1 = append(s1, c.publishValue("s1", msg(i), false))
		}
		c.fetchChecked("s1", "cached", 0) // the reader holds s1's records 1..5
		for i := 5; i < 8; i++ {
			s1 = append(s1, c.publishValue("s1", msg(i), false))
		}
		// Another session's request checks the stream up to s1's last.
		c.fetchChecked("s2", "another session", s1[7])
		st, err := c.js.Stream(ctx, "TRANSCRIPTS")
		require.NoError(t, err)
		// Every record of s1 before its eighth goes, read or not.
		require.NoError(t, st.Purge(ctx, jetstream.WithPurgeSubject("transcripts.s1"), jetstream.WithPurgeSequence(s1[7])))
		c.fetchChecked("s1", "after the removal", 0)
		c.fetchChecked("s1", "again", 0)
		require.Equal(t, map[string]int{"reader": 1}, c.roles(), "every reply came from the reader path")
	})
	t.Run("evicted", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		url := untoldServer(t)
		c := opClient(t, url)
		c.holdPin()
		startReader(t, url, func(c *app.Config) { c.CacheSessions = 1 })
		compactionGoneAfterEviction(ctx, c)
		require.Equal(t, map[string]int{"reader": 1}, c.roles(), "every reply came from the reader path")
	})
}

// TestOperator_PurgeEachBeforeReaderReads: every kind of removal
// (purgeActions), made after records the reader has not read yet of
// the sessions it cached, with no record after it.
func TestOperator_PurgeEachBeforeReaderReads(t *testing.T) {
	url := untoldServer(t)
	op := opClient(t, url)
	op.holdPin()
	for _, act := range purgeActions {
		t.Run(act.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c := &client{t: t, nc: op.nc, js: op.js}
			a := startReader(t, url)
			p1, _ := publishPurgeSessions(c, "before")
			c.fetchChecked("p1", "cached", 0)
			c.fetchChecked("p2", "cached", 0)
			var last uint64
			for i := range 3 {
				p1 = append(p1, c.publishValue("p1", record.NewMap("role", "user", "content", fmt.Sprintf("p1 unread %d", i)), false))
				last = c.publishValue("p2", record.NewMap("role", "user", "content", fmt.Sprintf("p2 unread %d", i)), false)
			}
			c.fetchChecked("x", "another session", last)
			st, err := c.js.Stream(ctx, "TRANSCRIPTS")
			require.NoError(t, err)
			require.NoError(t, act.do(ctx, st, p1))
			for range 2 {
				c.fetchChecked("p1", "after the removal", 0)
				c.fetchChecked("p2", "after the removal", 0)
			}
			require.Equal(t, map[string]int{"reader": 1}, c.roles(), "every reply came from the reader path")
			require.NoError(t, a.Close())
			// The next subtest starts from an empty stream.
			require.NoError(t, st.Purge(ctx))
		})
	}
}

// TestOperator_CompactionGoneBeforeIngestLoads: the instance that holds
// the ingest evicts a session, which remembers its latest compaction;
// that compaction is deleted, nothing is stored after it, and nobody
// tells the instance. The session's next load must not start at the
// compaction that is gone.
func TestOperator_CompactionGoneBeforeIngestLoads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := untoldServer(t)
	c := opClient(t, url)
	startReader(t, url, func(c *app.Config) { c.CacheSessions = 1; c.Instance = "ingest" })
	compactionGoneAfterEviction(ctx, c)
	require.Equal(t, map[string]int{"ingest": 1}, c.roles(), "every reply came from the instance that holds the ingest")
}

// compactionGoneAfterEviction has an instance with a cache of one session
// load s1 from its compaction and evict it (it remembers the compaction),
// deletes that compaction with no record after it, and checks every
// reply of s1 since.
func compactionGoneAfterEviction(ctx context.Context, c *client) {
	c.t.Helper()
	c.publishValue("s1", record.NewMap("role", "user", "content", "before"), false)
	compaction := c.publishValue("s1", purgeCompaction, false)
	last := c.publishValue("s1", record.NewMap("role", "assistant", "content", "after"), false)
	c.fetchChecked("s1", "cached", last) // loaded from its compaction
	mark := c.publishValue("s2", record.NewMap("role", "user", "content", "s2"), false)
	c.fetchChecked("s2", "another session", mark) // s1 is evicted, and remembers its compaction
	st, err := c.js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(c.t, err)
	require.NoError(c.t, st.DeleteMsg(ctx, compaction))
	c.fetchChecked("s1", "after the removal", last)
	c.fetchChecked("s1", "again", last)
}
