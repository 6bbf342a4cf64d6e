package deployments

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// ctxdBinary builds cmd/ctxd once per test run.
func ctxdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ctxd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "ctxd")
		if out, err := exec.Command("go", "build", "-o", binPath, "../cmd/ctxd").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// sampleUsers are, per shipped configuration, its users: ctxd's own,
// the applications' and the operators'.
var sampleUsers = []struct {
	file                string
	ctxd, app, operator string
}{
	{"nats/single.conf", "ctxd", "app", "operator"},
	{"nats/auth.conf", "ctxd", "app", "operator"},
	{"nats/cluster-n1.conf", "ctxd", "app", "operator"},
	{"tenants/nats.conf", "ctxd-a", "app-a", "ops-a"},
}

// TestServerConfigs_Users runs each shipped configuration in a real
// server with ctxd serving it as its user, and checks that each sample
// user can run the commands the README and docs/OPERATING.md give it,
// and not the others: app publishes records and fetches contexts
// (routed to a partition's owner, and in chunks when larger than the max
// payload); the operator also imports, inspects, compares (rebuild
// --check) and lists the rejected records, but writes no checkpoint;
// ctxd's user rebuilds them.
func TestServerConfigs_Users(t *testing.T) {
	if testing.Short() {
		t.Skip("runs ctxd and a server per configuration")
	}
	bin := ctxdBinary(t)
	for k, v := range serverPasswords {
		t.Setenv(k, v)
	}
	// The cluster's nodes have the same users.
	n1, err := server.ProcessConfigFile("nats/cluster-n1.conf")
	require.NoError(t, err)
	for _, f := range []string{"nats/cluster-n2.conf", "nats/cluster-n3.conf", "nats/single.conf", "nats/auth.conf"} {
		o, err := server.ProcessConfigFile(f)
		require.NoError(t, err)
		require.Equal(t, usersOf(t, n1), usersOf(t, o), "%s has the users of cluster-n1.conf", f)
	}
	for _, c := range sampleUsers {
		t.Run(c.file, func(t *testing.T) {
			opts, err := server.ProcessConfigFile(c.file)
			require.NoError(t, err)
			passwords := map[string]string{}
			for _, u := range opts.Users {
				passwords[u.Username] = u.Password
			}
			opts.Host, opts.Port, opts.StoreDir, opts.JetStream = "127.0.0.1", -1, t.TempDir(), true
			opts.HTTPPort = 0
			opts.Cluster, opts.Routes = server.ClusterOpts{}, nil
			opts.NoLog, opts.NoSigs = true, true
			// Small enough that a context of two records comes in chunks.
			opts.MaxPayload = 1 << 20
			s, err := server.NewServer(opts)
			require.NoError(t, err)
			go s.Start()
			t.Cleanup(s.Shutdown)
			require.True(t, s.ReadyForConnections(10*time.Second))
			url := s.ClientURL()

			as := func(user string) []string {
				return []string{"CTXD_NATS=" + url, "CTXD_USER=" + user, "CTXD_PASSWORD=" + passwords[user],
					"CTXD_INBOX_PREFIX=_INBOX_" + user, "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
			}
			serve(t, bin, as(c.ctxd), "--partitions", "4")
			run := func(user, stdin string, args ...string) (string, string, error) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = as(user)
				cmd.Stdin = strings.NewReader(stdin)
				var out, errOut strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &errOut
				err := cmd.Run()
				return out.String(), errOut.String(), err
			}
			may := func(user, stdin string, args ...string) string {
				t.Helper()
				out, errOut, err := run(user, stdin, args...)
				require.NoError(t, err, "%s may run ctxd %s:\n%s", user, strings.Join(args, " "), errOut)
				return out
			}
			mayNot := func(user, subject string, args ...string) {
				t.Helper()
				_, errOut, err := run(user, "", args...)
				require.Error(t, err, "%s may not run ctxd %s", user, strings.Join(args, " "))
				require.Contains(t, errOut, "permission denied", "ctxd %s as %s", strings.Join(args, " "), user)
				require.Contains(t, errOut, subject, "ctxd %s as %s", strings.Join(args, " "), user)
			}

			// app: publish, fetch, routed, in chunks.
			session, err := os.ReadFile("../examples/session.jsonl")
			require.NoError(t, err)
			seq := strings.TrimSpace(may(c.app, string(session), "publish", "--session", "demo"))
			require.Contains(t, may(c.app, "", "context", "demo", "--min-seq", seq), `"session":"demo"`)
			require.Contains(t, may(c.app, "", "context", "demo", "--min-seq", seq, "--partitions", "4"), `"session":"demo"`)
			text := strings.Repeat("x", 600<<10)
			big := fmt.Sprintf("{\"role\":\"user\",\"content\":%q}\n{\"role\":\"user\",\"content\":%q}\n", text, text)
			seq = strings.TrimSpace(may(c.app, big, "publish", "--session", "big"))
			require.Greater(t, len(may(c.app, "", "context", "big", "--min-seq", seq)), 1<<20, "a reply in chunks")
			mayNot(c.app, `"$JS.API.`, "inspect", "demo")
			mayNot(c.app, `"$JS.API.`, "import", "--from", "pi", "../pkg/importer/testdata/pi/session-01.jsonl")
			mayNot(c.app, `"ctxd.rejected"`, "rejected")

			// The operator: what app may, and import, inspect, compare.
			may(c.operator, "", "import", "--from", "pi", "../pkg/importer/testdata/pi/session-01.jsonl")
			require.Contains(t, may(c.operator, "", "inspect", "demo"), "demo")
			may(c.operator, "", "rejected")
			require.Contains(t, may(c.operator, "", "rebuild", "--check"), "no differences")
			require.Contains(t, may(c.operator, "", "context", "demo", "--partitions", "4"), `"session":"demo"`)
			mayNot(c.operator, "KV_CTXD_CHECKPOINTS", "rebuild")

			// ctxd's own ingest consumer: the operator can neither
			// re-filter it nor delete it.
			connect := func(user string) jetstream.JetStream {
				nc, err := nats.Connect(url, nats.UserInfo(user, passwords[user]), nats.CustomInboxPrefix("_INBOX_"+user))
				require.NoError(t, err)
				t.Cleanup(nc.Close)
				js, err := jetstream.New(nc)
				require.NoError(t, err)
				return js
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = connect(c.ctxd).CreateOrUpdateConsumer(ctx, "TRANSCRIPTS", jetstream.ConsumerConfig{Durable: "ctxd", AckPolicy: jetstream.AckNonePolicy})
			require.NoError(t, err)
			op := connect(c.operator)
			for what, try := range map[string]func(ctx context.Context) error{
				"re-filter": func(ctx context.Context) error {
					_, err := op.CreateOrUpdateConsumer(ctx, "TRANSCRIPTS", jetstream.ConsumerConfig{Durable: "ctxd", AckPolicy: jetstream.AckNonePolicy, FilterSubject: "transcripts.demo"})
					return err
				},
				"delete": func(ctx context.Context) error { return op.DeleteConsumer(ctx, "TRANSCRIPTS", "ctxd") },
			} {
				tctx, tcancel := context.WithTimeout(ctx, 3*time.Second)
				require.Error(t, try(tctx), "the operator may not %s ctxd's consumer", what)
				tcancel()
			}
			info, err := connect(c.ctxd).Consumer(ctx, "TRANSCRIPTS", "ctxd")
			require.NoError(t, err, "ctxd's consumer is still there")
			require.Empty(t, info.CachedInfo().Config.FilterSubject, "and reads every subject")

			// ctxd's user writes the checkpoints.
			require.Contains(t, may(c.ctxd, "", "rebuild"), "wrote ")
		})
	}
}

// serve runs ctxd serve with env and args until the test ends, and
// returns once it is ready.
func serve(t *testing.T, bin string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--start-timeout", "1m"}, args...)...)
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var errOut strings.Builder
	cmd.Stderr = &errOut
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ctxd ready ") {
				ready <- true
			}
		}
		close(ready)
	}()
	ok := <-ready
	require.True(t, ok, "ctxd serve did not start:\n%s", errOut.String())
}

// usersOf is the users of a configuration and their permissions, as JSON.
func usersOf(t *testing.T, o *server.Options) string {
	t.Helper()
	type user struct {
		Name        string
		Permissions *server.Permissions
	}
	var users []user
	for _, u := range o.Users {
		users = append(users, user{u.Username, u.Permissions})
	}
	data, err := json.Marshal(users)
	require.NoError(t, err)
	return string(data)
}
