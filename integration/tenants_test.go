package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/pkg/app"
	"github.com/ctxd/ctxd/pkg/natsd"
)

// tenantPasswords are the passwords deployments/tenants/accounts.conf
// reads from the environment.
var tenantPasswords = map[string]string{
	"CTXD_A_PASSWORD": "ctxd-a-pw", "APP_A_PASSWORD": "app-a-pw", "OPS_A_PASSWORD": "ops-a-pw",
	"CTXD_B_PASSWORD": "ctxd-b-pw", "APP_B_PASSWORD": "app-b-pw", "OPS_B_PASSWORD": "ops-b-pw",
	"SYS_PASSWORD": "sys-pw",
}

func tenantConn(t *testing.T, url, user string) *nats.Conn {
	t.Helper()
	pw := tenantPasswords[strings.ToUpper(strings.ReplaceAll(user, "-", "_"))+"_PASSWORD"]
	require.NotEmpty(t, pw, user)
	nc, err := nats.Connect(url, nats.UserInfo(user, pw), nats.Name(user))
	require.NoError(t, err, user)
	t.Cleanup(nc.Close)
	return nc
}

// TestTenants_Isolation runs deployments/tenants/accounts.conf in a real
// server with a ctxd per tenant account and proves, for both tenants,
// that a tenant's users publish only to their sessions and fetch only
// their contexts, and reach none of the other tenant's records,
// contexts, chunks or rejected list.
func TestTenants_Isolation(t *testing.T) {
	for k, v := range tenantPasswords {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	accounts, err := os.ReadFile(filepath.Join("..", "deployments", "tenants", "accounts.conf"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600))
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("max_payload: 8MB\ninclude ./accounts.conf\n"), 0o600))
	srv := natsd.New(filepath.Join(dir, "js"))
	srv.Port = -1
	srv.ConfigFile = conf
	require.NoError(t, srv.Open())
	t.Cleanup(func() { srv.Close() })
	url := srv.ClientURL()

	startTenant := func(user string) *app.App {
		return startApp(t, t.TempDir(), func(c *app.Config) {
			c.NATSURL = url
			c.NATSOptions = []nats.Option{nats.UserInfo(user, tenantPasswords[strings.ToUpper(strings.ReplaceAll(user, "-", "_"))+"_PASSWORD"])}
		})
	}
	startTenant("ctxd-a")
	startTenant("ctxd-b")

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
			// ops users cannot publish records nor fetch contexts.
			_, err = tn.ops.Request("ctxd.context.shared", nil, 2*time.Second)
			require.Error(t, err)
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
