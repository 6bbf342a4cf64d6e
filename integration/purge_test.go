//go:build slow

package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/projection"
	"github.com/ctxd/ctxd/pkg/record"
)

var (
	purgeSteps = flag.Int("purge.steps", 300, "steps of TestOperator_PurgeRandom (-short: 100)")
	purgeSeed  = flag.Uint64("purge.seed", 0, "seed of TestOperator_PurgeRandom (0: a new one, printed)")
)

// Operators remove records from the stream (nats stream purge, with or
// without --subject, --seq, --keep; nats stream rmm), through the same
// JetStream API the nats CLI uses. A context holds only what the stream
// holds: whether ctxd runs (the session cached in the ingest store of
// the pinned instance, or in the reader store of another) or is stopped
// (its checkpoint then names records that are gone), every reply after
// the removal equals Build of the session's records the stream holds.

// fetchCheckedAmong is fetchChecked where the reply may also be built
// from what the stream held of the session at one of earlier: before a
// removal no record followed, which an instance that cached the session
// has not found yet.
func (c *client) fetchCheckedAmong(session, label string, mark uint64, earlier []map[string][]projection.Record) {
	c.t.Helper()
	if len(earlier) == 0 {
		c.fetchChecked(session, label, mark)
		return
	}
	recs := c.holds(session)
	var minSeq uint64
	if len(recs) > 0 {
		minSeq = recs[len(recs)-1].Seq
	}
	msg := c.request("ctxd.context."+session, []byte(fmt.Sprintf(`{"min_seq":%d,"wait_ms":10000}`, max(minSeq, mark))), nil)
	require.Empty(c.t, msg.Header.Get(micro.ErrorCodeHeader), "%s: %s: error reply %s", label, session, msg.Header.Get(micro.ErrorHeader))
	r := read{session: session, minSeq: minSeq, data: msg.Data}
	diff := checkReply(c.t, r, recs)
	if diff == "" {
		return
	}
	for _, held := range earlier {
		if checkReply(c.t, r, held[session]) == "" {
			return
		}
	}
	c.t.Fatalf("%s: %s: %s (the stream holds %d records of it; nor is it what it held before any of the %d removals since the latest record)", label, session, diff, len(recs), len(earlier))
}

// TestOperator_PurgeWhileRunning: the sessions are cached by a running
// ctxd (alone: in its ingest store; beside another instance: in the
// reader store of the one not pinned, which requests reach too) when
// the operator removes records; then records come again.
func TestOperator_PurgeWhileRunning(t *testing.T) {
	for _, instances := range []int{1, 2} {
		for _, act := range purgeActions {
			t.Run(fmt.Sprintf("%s/instances=%d", act.name, instances), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				url := natstest.Start(t)
				var apps []*app.App
				for i := range instances {
					apps = append(apps, startApp(t, t.TempDir(), func(c *app.Config) {
						c.NATSURL = url
						c.Instance = fmt.Sprintf("i%d", i)
					}))
				}
				c := newClient(t, url)
				p1, last := publishPurgeSessions(c, "before")
				// Every instance answers some of these, and caches both.
				for range 8 * instances {
					c.fetchChecked("p1", "before", last)
					c.fetchChecked("p2", "before", last)
				}
				st, err := c.js.Stream(ctx, "TRANSCRIPTS")
				require.NoError(t, err)
				require.NoError(t, act.do(ctx, st, p1))
				// A record of another session, after the removal.
				mark := c.publishValue("marker", record.NewMap("role", "user", "content", "marker"), false)
				for range 4 * instances {
					c.fetchChecked("p1", "after the removal", mark)
					c.fetchChecked("p2", "after the removal", mark)
				}
				for i := range 3 {
					c.publishValue("p1", record.NewMap("role", "user", "content", fmt.Sprintf("p1 after %d", i)), false)
					last = c.publishValue("p2", record.NewMap("role", "user", "content", fmt.Sprintf("p2 after %d", i)), false)
					for range 2 * instances {
						c.fetchChecked("p1", "new records", 0)
						c.fetchChecked("p2", "new records", 0)
					}
				}
				for _, a := range apps {
					require.NoError(t, a.Close())
				}
				// Started again, from the checkpoints the instances wrote.
				startApp(t, t.TempDir(), func(c *app.Config) { c.NATSURL = url })
				c.fetchChecked("p1", "restarted", last)
				c.fetchChecked("p2", "restarted", last)
			})
		}
	}
}

// TestOperator_PurgeNotTold: ctxd's user may not subscribe to the API
// audit advisories, so no removal is told to it (as when they are lost
// while its connection is down). The stream's state tells it that
// records left: every session loads from the stream again, and every
// reply is right.
func TestOperator_PurgeNotTold(t *testing.T) {
	url := untoldServer(t)
	for _, act := range purgeActions {
		t.Run(act.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			nc, err := nats.Connect(url, nats.UserInfo("op", "op-pw"))
			require.NoError(t, err)
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			c := &client{t: t, nc: nc, js: js}
			var apps []*app.App
			for i := range 2 {
				apps = append(apps, startApp(t, t.TempDir(), func(c *app.Config) {
					c.NATSURL = url
					c.Instance = fmt.Sprintf("i%d", i)
					c.NATSOptions = []nats.Option{nats.UserInfo("ctxd", "ctxd-pw")}
				}))
			}
			p1, last := publishPurgeSessions(c, "before")
			for range 16 {
				c.fetchChecked("p1", "before", last)
				c.fetchChecked("p2", "before", last)
			}
			st, err := c.js.Stream(ctx, "TRANSCRIPTS")
			require.NoError(t, err)
			require.NoError(t, act.do(ctx, st, p1))
			mark := c.publishValue("marker", record.NewMap("role", "user", "content", "marker"), false)
			for range 8 {
				c.fetchChecked("p1", "after the removal", mark)
				c.fetchChecked("p2", "after the removal", mark)
			}
			c.publishValue("p1", record.NewMap("role", "user", "content", "p1 after"), false)
			for range 8 {
				c.fetchChecked("p1", "new records", 0)
				c.fetchChecked("p2", "new records", 0)
			}
			for _, a := range apps {
				require.NoError(t, a.Close())
			}
			// The next subtest starts from an empty stream.
			require.NoError(t, st.Purge(ctx))
		})
	}
}

// TestOperator_PurgeWhileStopped: ctxd wrote every session's checkpoint,
// with its index, and stopped; the operator removes records; ctxd starts
// again. The checkpoints name records that are gone: the loads find it
// and read the sessions' subjects.
func TestOperator_PurgeWhileStopped(t *testing.T) {
	for _, act := range purgeActions {
		for _, more := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/new_records=%v", act.name, more), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				url := natstest.Start(t)
				dir := t.TempDir()
				a := startApp(t, dir, func(c *app.Config) { c.NATSURL = url })
				c := newClient(t, url)
				p1, last := publishPurgeSessions(c, "before")
				require.NoError(t, a.Wait(ctx, last, 30*time.Second))
				c.fetchChecked("p1", "before", 0)
				c.fetchChecked("p2", "before", 0)
				require.NoError(t, a.Close())

				st, err := c.js.Stream(ctx, "TRANSCRIPTS")
				require.NoError(t, err)
				require.NoError(t, act.do(ctx, st, p1))
				a = startApp(t, dir, func(c *app.Config) { c.NATSURL = url })
				if more {
					c.publishValue("p1", record.NewMap("role", "user", "content", "p1 after"), false)
					c.publishValue("p2", record.NewMap("role", "user", "content", "p2 after"), false)
				}
				for range 2 {
					c.fetchChecked("p1", "restarted", 0)
					c.fetchChecked("p2", "restarted", 0)
				}
				_ = a
			})
		}
	}
}

// TestOperator_PurgeRandom interleaves records, purges of every kind,
// deletions, fetches and restarts over two instances, at random; every
// reply must equal Build of what the stream holds of its session. One
// instance is told of removals by their advisories, the other may not
// subscribe to them and finds them by the stream's count alone; each
// answers as the pinned one or through the stream (the reader path),
// as the pin moves with the restarts. A removal is followed by a record
// of another session or not: without one, a session the instances
// cached and have nothing new to read of may be answered as it was
// before the removal (from memory) until the removal is found, so such
// a reply may also equal Build of what the stream held before a removal
// since the latest record; never anything else. -purge.seed repeats a
// run, -purge.steps makes it longer.
func TestOperator_PurgeRandom(t *testing.T) {
	seed := *purgeSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	steps := *purgeSteps
	if testing.Short() {
		steps = min(steps, 100)
	}
	t.Logf("-purge.seed=%d -purge.steps=%d", seed, steps)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	url := untoldServer(t)
	start := func(i int) *app.App {
		user := nats.UserInfo("op", "op-pw") // told
		if i == 1 {
			user = nats.UserInfo("ctxd", "ctxd-pw") // not told
		}
		return startApp(t, t.TempDir(), func(c *app.Config) {
			c.NATSURL = url
			c.Instance = fmt.Sprintf("i%d-%d", i, rng.IntN(1000))
			// Evictions too, or none: a session caught up is one
			// still cached.
			c.CacheSessions = []int{2, 3, 5, 100}[rng.IntN(4)]
			c.NATSOptions = []nats.Option{user}
		})
	}
	apps := []*app.App{start(0), start(1)}
	c := opClient(t, url)
	st, err := c.js.Stream(ctx, "TRANSCRIPTS")
	require.NoError(t, err)
	ids := []string{"q0", "q1", "q2", "q3", "q4", "q5"}
	pick := func() string { return ids[rng.IntN(len(ids))] }
	// published lists every sequence published, for deletions; mark is
	// the latest, and follows every removal but those in earlier: what
	// the stream held of each session before each of them.
	var published []uint64
	var mark uint64
	var earlier []map[string][]projection.Record
	remove := func(label string, do func() error) {
		var before map[string][]projection.Record
		marked := rng.IntN(2) == 0
		if !marked {
			before = map[string][]projection.Record{}
			for _, id := range ids {
				before[id] = c.holds(id)
			}
		}
		require.NoError(t, do(), label)
		if marked {
			mark = c.publishValue("marker", record.NewMap("role", "user", "content", "marker"), false)
			earlier = nil
		} else {
			earlier = append(earlier, before)
		}
	}
	for step := range steps {
		label := fmt.Sprintf("step %d (seed %d)", step, seed)
		switch n := rng.IntN(100); {
		case n < 45:
			id := pick()
			v := any(record.NewMap("role", []string{"user", "assistant"}[rng.IntN(2)], "content", fmt.Sprintf("%s %d", id, step)))
			if rng.IntN(8) == 0 {
				v = purgeCompaction
			}
			mark = c.publishValue(id, v, false)
			published = append(published, mark)
			earlier = nil
		case n < 75:
			c.fetchCheckedAmong(pick(), label, mark, earlier)
		case n < 80:
			// Every session, from both instances (at random): each
			// caches them, and checks the stream up to mark.
			for range 2 {
				for _, id := range ids {
					c.fetchCheckedAmong(id, label, mark, earlier)
				}
			}
		case n < 84:
			remove(label, func() error { return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts."+pick())) })
		case n < 87 && len(published) > 0:
			seq := published[rng.IntN(len(published))] + 1
			remove(label, func() error {
				return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts."+pick()), jetstream.WithPurgeSequence(seq))
			})
		case n < 90:
			remove(label, func() error {
				return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts."+pick()), jetstream.WithPurgeKeep(uint64(rng.IntN(4))))
			})
		case n < 91:
			remove(label, func() error { return st.Purge(ctx) })
		case n < 93:
			// The session cached by the instances (each request goes to
			// one at random), records of it they have not read, a fetch
			// of another session that checks the stream past them, a
			// removal that keeps the last of them and no record after,
			// and the session asked for again.
			id := pick()
			other := ids[(slices.Index(ids, id)+1)%len(ids)]
			for range 3 {
				c.fetchCheckedAmong(id, label, mark, earlier)
			}
			for i := range 2 {
				mark = c.publishValue(id, record.NewMap("role", "user", "content", fmt.Sprintf("%s %d.%d", id, step, i)), false)
				published = append(published, mark)
			}
			earlier = nil
			for range 2 {
				c.fetchChecked(other, label, mark)
			}
			remove(label, func() error {
				return st.Purge(ctx, jetstream.WithPurgeSubject("transcripts."+id), jetstream.WithPurgeSequence(mark))
			})
			for range 2 {
				c.fetchCheckedAmong(id, label, mark, earlier)
			}
		case n < 97 && len(published) > 0:
			seq := published[rng.IntN(len(published))]
			secure := rng.IntN(2) == 0
			remove(label, func() error {
				var err error
				if secure {
					err = st.SecureDeleteMsg(ctx, seq)
				} else {
					err = st.DeleteMsg(ctx, seq)
				}
				if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
					return nil // deleted or purged before
				}
				return err
			})
		default:
			i := rng.IntN(len(apps))
			require.NoError(t, apps[i].Close(), label)
			apps[i] = start(i)
		}
	}
	mark = c.publishValue("marker", record.NewMap("role", "user", "content", "marker"), false)
	for _, id := range ids {
		c.fetchChecked(id, "end", mark)
	}
}
