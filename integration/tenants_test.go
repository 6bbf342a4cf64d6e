//go:build slow

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/app"
	ctxdclient "github.com/ctxd/ctxd/pkg/client"
	"github.com/ctxd/ctxd/pkg/natsd"
	"github.com/ctxd/ctxd/streams"
)

// tenantPasswords are the passwords deployments/tenants/accounts.conf
// reads from the environment.
var tenantPasswords = map[string]string{
	"CTXD_A_PASSWORD": "ctxd-a-pw", "APP_A_PASSWORD": "app-a-pw", "OPS_A_PASSWORD": "ops-a-pw",
	"CTXD_B_PASSWORD": "ctxd-b-pw", "APP_B_PASSWORD": "app-b-pw", "OPS_B_PASSWORD": "ops-b-pw",
	"SYS_PASSWORD": "sys-pw",
}

// tenantInboxPrefix is the inbox prefix a user of accounts.conf connects
// with: the only inboxes it may subscribe to.
func tenantInboxPrefix(user string) string { return "_INBOX_" + user }

// tenantOptions are how a user of accounts.conf connects: its password
// and its inbox prefix.
func tenantOptions(t *testing.T, user string) []nats.Option {
	t.Helper()
	pw := tenantPasswords[strings.ToUpper(strings.ReplaceAll(user, "-", "_"))+"_PASSWORD"]
	require.NotEmpty(t, pw, user)
	opts := []nats.Option{nats.UserInfo(user, pw), nats.Name(user)}
	if p := tenantInboxPrefix(user); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	return opts
}

func tenantConn(t *testing.T, url, user string, more ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append(tenantOptions(t, user), more...)...)
	require.NoError(t, err, user)
	t.Cleanup(nc.Close)
	return nc
}

// startTenants runs deployments/tenants/accounts.conf in a real server
// with the given max_payload, and a ctxd for each tenant account, each
// connected as its ctxd-* user; it returns the server's URL.
func startTenants(t *testing.T, maxPayload string) string {
	t.Helper()
	for k, v := range tenantPasswords {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	accounts, err := os.ReadFile(filepath.Join("..", "deployments", "tenants", "accounts.conf"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600))
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("max_payload: "+maxPayload+"\ninclude ./accounts.conf\n"), 0o600))
	srv := natsd.New(filepath.Join(dir, "js"))
	srv.Port = -1
	srv.ConfigFile = conf
	require.NoError(t, srv.Open())
	t.Cleanup(func() { srv.Close() })
	url := srv.ClientURL()
	for _, user := range []string{"ctxd-a", "ctxd-b"} {
		startApp(t, t.TempDir(), func(c *app.Config) {
			c.NATSURL = url
			c.NATSOptions = tenantOptions(t, user)
		})
	}
	return url
}

// TestTenants_Isolation runs deployments/tenants/accounts.conf in a real
// server with a ctxd per tenant account and proves, for both tenants,
// that a tenant's users publish only to their sessions and fetch only
// their contexts, and reach none of the other tenant's records,
// contexts, chunks or rejected list.
func TestTenants_Isolation(t *testing.T) {
	url := startTenants(t, "8MB")

	type tenant struct {
		name, other string
		app, ops    *nats.Conn
		js          jetstream.JetStream
		admin       jetstream.JetStream // the tenant's ctxd user
	}
	tenants := map[string]*tenant{}
	for _, n := range []string{"a", "b"} {
		tn := &tenant{name: n, app: tenantConn(t, url, "app-"+n), ops: tenantConn(t, url, "ops-"+n)}
		tn.other = map[string]string{"a": "b", "b": "a"}[n]
		var err error
		tn.js, err = jetstream.New(tn.app)
		require.NoError(t, err)
		tn.admin, err = jetstream.New(tenantConn(t, url, "ctxd-"+n))
		require.NoError(t, err)
		tenants[n] = tn
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Each tenant publishes to the same session name, and to one of its
	// own, plus a record ctxd rejects.
	seqs := map[string]uint64{}
	for n, tn := range tenants {
		ack, err := tn.js.Publish(ctx, "transcripts.shared", []byte(`{"role":"user","content":"secret of `+n+`"}`))
		require.NoError(t, err, "app-%s publishes to its sessions", n)
		_, err = tn.js.Publish(ctx, "transcripts.only-"+n, []byte(`{"role":"user","content":"only `+n+`"}`))
		require.NoError(t, err)
		ack, err = tn.js.Publish(ctx, "transcripts.shared", []byte(`not a record of `+n))
		require.NoError(t, err)
		seqs[n] = ack.Sequence
	}

	fetch := func(nc *nats.Conn, session string, minSeq uint64) (reply, *nats.Msg) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"min_seq": minSeq})
		msg, err := nc.Request("ctxd.context."+session, body, 10*time.Second)
		require.NoError(t, err)
		var r reply
		if msg.Header.Get("Nats-Service-Error-Code") == "" {
			require.NoError(t, json.Unmarshal(msg.Data, &r))
		}
		return r, msg
	}

	for n, tn := range tenants {
		o := tn.other
		t.Run("tenant "+n, func(t *testing.T) {
			// Contexts: its own, never the other's, even for a session
			// of the same name.
			r, msg := fetch(tn.app, "shared", seqs[n])
			require.Contains(t, string(msg.Data), "secret of "+n)
			require.NotContains(t, string(msg.Data), "secret of "+o)
			require.Len(t, r.Messages, 1)
			r, msg = fetch(tn.app, "only-"+o, 0)
			require.Equal(t, uint64(0), r.Seq, "the other tenant's session does not exist here")
			require.NotContains(t, string(msg.Data), "only "+o)

			// Records: the tenant's apps have no JetStream API and cannot
			// subscribe to transcripts; its ctxd's stream holds its own
			// records only.
			short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
			_, err := tn.js.Stream(short, "TRANSCRIPTS")
			cancelShort()
			require.Error(t, err, "app-%s reads no stream", n)
			_, err = tn.app.SubscribeSync("transcripts.>")
			require.NoError(t, err) // refused asynchronously by the server:
			require.Eventually(t, func() bool {
				return tn.app.LastError() != nil && strings.Contains(strings.ToLower(tn.app.LastError().Error()), "permissions violation")
			}, 10*time.Second, 10*time.Millisecond)
			st, err := tn.admin.Stream(ctx, "TRANSCRIPTS")
			require.NoError(t, err)
			for seq := uint64(1); seq <= 3; seq++ {
				m, err := st.GetMsg(ctx, seq)
				require.NoError(t, err)
				require.NotContains(t, string(m.Data), "of "+o, "seq %d of %s's stream", seq, n)
				require.NotContains(t, string(m.Data), "only "+o, "seq %d of %s's stream", seq, n)
			}

			// Chunks: the other tenant's chunk subjects have no responder
			// here; its own do (an unknown chunk is a 404).
			own, other := chunkPrefix(t, tenants[n].ops), chunkPrefix(t, tenants[o].ops)
			msg, err = tn.app.Request(own+".nosuch.1", nil, 5*time.Second)
			require.NoError(t, err)
			require.Equal(t, "404", msg.Header.Get("Nats-Service-Error-Code"))
			_, err = tn.app.Request(other+".nosuch.1", nil, 2*time.Second)
			require.ErrorIs(t, err, nats.ErrNoResponders, "app-%s reaches %s's chunks", n, o)

			// Routed requests of a partitioned stream: the apps may send
			// them (here no instance answers them: the stream has none).
			_, err = tn.app.Request("ctxd.p.0.shared", nil, 2*time.Second)
			require.ErrorIs(t, err, nats.ErrNoResponders, "app-%s may ask a partition's endpoint", n)

			// Rejected list: not for apps; the tenant's operators see
			// their own rejected records only.
			_, err = tn.app.Request("ctxd.rejected", nil, 2*time.Second)
			require.Error(t, err, "app-%s reads the rejected list", n)
			msg, err = tn.ops.Request("ctxd.rejected", nil, 5*time.Second)
			require.NoError(t, err)
			require.Contains(t, string(msg.Data), `"subject":"transcripts.shared"`)
			var rejected []map[string]any
			require.NoError(t, json.Unmarshal(msg.Data, &rejected))
			require.Len(t, rejected, 1)
			// The tenant's operators fetch its contexts too (ctxd
			// rebuild --check compares them).
			msg, err = tn.ops.Request("ctxd.context.shared", nil, 5*time.Second)
			require.NoError(t, err)
			require.Contains(t, string(msg.Data), `"session":"shared"`)
		})
	}
}

// chunkPrefix returns ctxd.chunk.<instance> of the tenant's ctxd, from
// $SRV.INFO as its operators see it.
func chunkPrefix(t *testing.T, ops *nats.Conn) string {
	t.Helper()
	msg, err := ops.Request("$SRV.INFO.ctxd", nil, 5*time.Second)
	require.NoError(t, err)
	var info struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(msg.Data, &info))
	require.NotEmpty(t, info.ID)
	return "ctxd.chunk." + info.ID
}

// TestTenants_PrivateInboxes: inside one tenant account, no user
// receives another's replies: not an application's context replies,
// chunks and PubAcks, not the ingest's deliveries nor ctxd's JetStream
// API replies, not the operators' replies; and every user still gets
// its own (records published, a context in pushed and in fetched
// chunks, the rejected list, service discovery).
func TestTenants_PrivateInboxes(t *testing.T) {
	url := startTenants(t, "1MB")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A spy per user, on a connection of its own that sends nothing:
	// it subscribes to nats.go's default inboxes and to every other
	// user's of its account.
	type spy struct {
		user string
		nc   *nats.Conn
		log  *natstest.PermissionLog
		subs map[string]*nats.Subscription
	}
	var spies []*spy
	for _, u := range []string{"app-b", "ops-b"} {
		s := &spy{user: u, log: &natstest.PermissionLog{}, subs: map[string]*nats.Subscription{}}
		s.nc = tenantConn(t, url, u, nats.ErrorHandler(s.log.Handler))
		subjects := []string{"_INBOX.>"}
		for _, o := range []string{"ctxd-b", "app-b", "ops-b"} {
			if p := tenantInboxPrefix(o); o != u && p != "" {
				subjects = append(subjects, p+".>")
			}
		}
		for _, subj := range subjects {
			sub, err := s.nc.SubscribeSync(subj)
			require.NoError(t, err)
			s.subs[subj] = sub
		}
		require.NoError(t, s.nc.Flush())
		spies = append(spies, s)
	}

	app, ops := tenantConn(t, url, "app-b"), tenantConn(t, url, "ops-b")
	js, err := jetstream.New(app)
	require.NoError(t, err)
	filler := strings.Repeat("x", 400<<10)
	var last uint64
	for i := range 3 {
		ack, err := js.Publish(ctx, "transcripts.secretB", []byte(`{"role":"user","content":"secret `+strconv.Itoa(i)+` `+filler+`"}`))
		require.NoError(t, err)
		last = ack.Sequence
	}
	_, err = js.Publish(ctx, "transcripts.secretB", []byte(`not a record`))
	require.NoError(t, err)

	// The context, larger than the max payload: pushed (pkg/client) and
	// fetched (as nats req does), the same bytes.
	pushed, err := ctxdclient.Context(ctx, app, "secretB", ctxdclient.Request{MinSeq: last + 1})
	require.NoError(t, err)
	require.Greater(t, int64(len(pushed)), app.MaxPayload())
	require.Contains(t, string(pushed), "secret 2")
	msg, err := app.Request("ctxd.context.secretB", nil, 10*time.Second)
	require.NoError(t, err)
	n, _ := strconv.Atoi(msg.Header.Get("Ctxd-Chunks"))
	require.Greater(t, n, 1, "a chunked reply")
	fetched := append([]byte(nil), msg.Data...)
	for k := 1; k < n; k++ {
		part, err := app.Request(msg.Header.Get("Ctxd-Chunk-Subject")+"."+strconv.Itoa(k), nil, 10*time.Second)
		require.NoError(t, err)
		fetched = append(fetched, part.Data...)
	}
	require.Equal(t, pushed, fetched)

	// The operators' replies.
	msg, err = ops.Request("ctxd.rejected", nil, 5*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(msg.Data), `"subject":"transcripts.secretB"`)
	instances, err := ctxdclient.Instances(ctx, ops, 500*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, instances, 1)

	// Whatever reached a spy came before its flush's answer.
	for _, s := range spies {
		require.NoError(t, s.nc.Flush())
		var leaked []string
		for subj, sub := range s.subs {
			for {
				m, err := sub.NextMsg(time.Millisecond)
				if err != nil {
					break
				}
				leaked = append(leaked, fmt.Sprintf("%s on %s: %s (Nats-Subject %q) %.40q", s.user, subj, m.Subject, m.Header.Get("Nats-Subject"), m.Data))
			}
		}
		require.Empty(t, leaked, "%s received other users' replies", s.user)
		for subj := range s.subs {
			require.Eventually(t, func() bool { return s.log.Refused(subj) }, 10*time.Second, 10*time.Millisecond, "%s may subscribe to %s", s.user, subj)
		}
	}
}

// TestTenants_BucketsOnlyCtxd: only a tenant's ctxd user writes its
// buckets: no other user of the account may put a value in
// $KV.CTXD_*, nor purge, delete, update or read their streams through
// the JetStream API, so no one but ctxd can make it serve a snapshot or
// a checkpoint (their checksums are integrity, not authenticity).
func TestTenants_BucketsOnlyCtxd(t *testing.T) {
	url := startTenants(t, "8MB")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	protected := []string{
		"$KV." + streams.SnapshotsBucket + ".forged",
		"$KV." + streams.CheckpointsBucket + ".forged",
		"$JS.API.STREAM.PURGE.KV_" + streams.SnapshotsBucket,
		"$JS.API.STREAM.MSG.DELETE.KV_" + streams.CheckpointsBucket,
		"$JS.API.STREAM.UPDATE.KV_" + streams.SnapshotsBucket,
		"$JS.API.STREAM.DELETE.KV_" + streams.SnapshotsBucket,
		"$JS.API.STREAM.MSG.GET.KV_" + streams.SnapshotsBucket,
		"$JS.API.DIRECT.GET.KV_" + streams.SnapshotsBucket,
		"$JS.API.CONSUMER.CREATE.KV_" + streams.CheckpointsBucket,
	}
	for _, u := range []string{"app-b", "ops-b"} {
		log := &natstest.PermissionLog{}
		nc := tenantConn(t, url, u, nats.ErrorHandler(log.Handler))
		inbox := nc.NewRespInbox()
		for _, subj := range protected {
			require.NoError(t, nc.PublishRequest(subj, inbox, []byte(`{"forged":true}`)))
		}
		require.NoError(t, nc.Flush())
		for _, subj := range protected {
			require.Eventually(t, func() bool { return log.Refused(subj) }, 10*time.Second, 10*time.Millisecond, "%s may publish to %s", u, subj)
		}
	}
	admin, err := jetstream.New(tenantConn(t, url, "ctxd-b"))
	require.NoError(t, err)
	for _, bucket := range []string{streams.SnapshotsBucket, streams.CheckpointsBucket} {
		kv, err := admin.KeyValue(ctx, bucket)
		require.NoError(t, err)
		_, err = kv.Get(ctx, "forged")
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, bucket)
	}
}
