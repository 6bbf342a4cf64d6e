// Package deployments holds ctxd's deployment files; its test checks that
// the NATS configurations parse.
package deployments

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/ctxd/ctxd/internal/natstest"
	"github.com/ctxd/ctxd/pkg/ops"
	"github.com/ctxd/ctxd/pkg/store"
)

func TestNATSConfigsParse(t *testing.T) {
	t.Setenv("CTXD_PASSWORD", "pw1")
	t.Setenv("APP_PASSWORD", "pw2")
	t.Setenv("OPERATOR_PASSWORD", "pw3")
	files, err := filepath.Glob("nats/*.conf")
	require.NoError(t, err)
	require.Len(t, files, 5)
	for _, f := range files {
		opts, err := server.ProcessConfigFile(f)
		require.NoError(t, err, f)
		require.True(t, opts.JetStream, f)
		require.True(t, opts.SyncAlways, f)
		require.Equal(t, int32(8<<20), opts.MaxPayload, f)
		if strings.Contains(f, "cluster-") {
			// A frozen node is left within seconds (docs/PERFORMANCE.md,
			// node faults).
			require.Equal(t, time.Second, opts.Cluster.PingInterval, f)
			require.Equal(t, 2, opts.Cluster.MaxPingsOut, f)
		}
	}
}

// TestTenantsConfigParses: the tenants' server configuration, with the
// passwords it reads from the environment, parses and has both accounts
// with JetStream. integration/tenants_test.go runs it.
func TestTenantsConfigParses(t *testing.T) {
	for _, k := range []string{"CTXD_A_PASSWORD", "APP_A_PASSWORD", "OPS_A_PASSWORD", "CTXD_B_PASSWORD", "APP_B_PASSWORD", "OPS_B_PASSWORD", "SYS_PASSWORD"} {
		t.Setenv(k, "pw-"+k)
	}
	opts, err := server.ProcessConfigFile("tenants/nats.conf")
	require.NoError(t, err)
	require.True(t, opts.JetStream)
	names := map[string]bool{}
	for _, a := range opts.Accounts {
		names[a.Name] = true
	}
	require.True(t, names["TENANT_A"] && names["TENANT_B"], "accounts: %v", names)
	require.Len(t, opts.Users, 7)
}

// natsServerVersion is the nats-server version of go.mod: the one ctxd
// is built and tested with.
func natsServerVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`github.com/nats-io/nats-server/v2 v(\S+)`).FindSubmatch(data)
	require.NotNil(t, m)
	return string(m[1])
}

func TestCompose(t *testing.T) {
	var c struct {
		Services map[string]struct {
			Build struct {
				Args map[string]string `yaml:"args"`
			} `yaml:"build"`
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	data, err := os.ReadFile("compose/compose.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &c))
	want := natsServerVersion(t)
	nats := 0
	for name, s := range c.Services {
		if strings.HasPrefix(s.Image, "nats:") {
			nats++
			require.Equal(t, want, strings.TrimSuffix(strings.TrimPrefix(s.Image, "nats:"), "-alpine"), "%s: the NATS version ctxd is built with", name)
		}
	}
	require.Positive(t, nats)
	for name, port := range map[string]string{"ctxd-a": "127.0.0.1:9090:9090", "ctxd-b": "127.0.0.1:9091:9090"} {
		ctxd := c.Services[name]
		require.Equal(t, []string{port}, ctxd.Ports, name)
		require.Contains(t, strings.Join(ctxd.Command, " "), "--http 0.0.0.0:9090", name)
		require.Contains(t, ctxd.Environment, "CTXD_HTTP_TOKEN", "%s: listening beyond loopback needs a token", name)
		// The nodes' users (nats/cluster-n*.conf): ctxd's own, on its
		// own inbox prefix.
		require.Equal(t, "ctxd", ctxd.Environment["CTXD_USER"], name)
		require.Contains(t, ctxd.Environment, "CTXD_PASSWORD", name)
		require.Equal(t, "_INBOX_ctxd", ctxd.Environment["CTXD_INBOX_PREFIX"], name)
		// The image reports the version it was built from, not (devel):
		// the build sees no .git.
		require.Regexp(t, `^\$\{CTXD_VERSION:\?`, ctxd.Build.Args["VERSION"], name)
	}
	require.Equal(t, []string{"127.0.0.1:4222:4222"}, c.Services["n1"].Ports, "NATS clients only: monitoring stays on the node's loopback")
	for _, n := range []string{"n1", "n2", "n3"} {
		require.Contains(t, c.Services[n].Environment, "CTXD_PASSWORD", n)
		require.Contains(t, c.Services[n].Environment, "APP_PASSWORD", n)
		require.Contains(t, c.Services[n].Environment, "OPERATOR_PASSWORD", n)
	}

	ignore, err := os.ReadFile("../.dockerignore")
	require.NoError(t, err)
	require.Contains(t, strings.Fields(string(ignore)), ".git")
}

func TestKubernetes(t *testing.T) {
	data, err := os.ReadFile("k8s/ctxd.yaml")
	require.NoError(t, err)
	var d struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"metadata"`
				Spec struct {
					Containers []struct {
						Image string   `yaml:"image"`
						Args  []string `yaml:"args"`
						Ports []struct {
							Name          string `yaml:"name"`
							ContainerPort int    `yaml:"containerPort"`
						} `yaml:"ports"`
						LivenessProbe  probe `yaml:"livenessProbe"`
						ReadinessProbe probe `yaml:"readinessProbe"`
						StartupProbe   probe `yaml:"startupProbe"`
						Env            []struct {
							Name      string `yaml:"name"`
							ValueFrom struct {
								SecretKeyRef struct {
									Name string `yaml:"name"`
									Key  string `yaml:"key"`
								} `yaml:"secretKeyRef"`
							} `yaml:"valueFrom"`
						} `yaml:"env"`
						Resources struct {
							Requests map[string]string `yaml:"requests"`
						} `yaml:"resources"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(data, &d))
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	c := d.Spec.Template.Spec.Containers[0]
	require.Regexp(t, `(?m)^\s+image: `+regexp.QuoteMeta(c.Image)+` # replace`, string(data), "the image line says to replace it")
	args := map[string]string{}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			args[k] = v
		}
	}
	_, port, err := net.SplitHostPort(args["--http"])
	require.NoError(t, err)
	require.Len(t, c.Ports, 1)
	require.Equal(t, port, strconv.Itoa(c.Ports[0].ContainerPort))
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	// Started means serving: /healthz answers as soon as the listener
	// does, before the stream and the consumer are verified.
	require.Equal(t, "/readyz", c.StartupProbe.HTTPGet.Path)
	require.Equal(t, c.Ports[0].Name, c.StartupProbe.HTTPGet.Port)

	// /metrics needs the token: a scrape by annotations sends none and
	// gets 401. The PodMonitor sends the token of the secret ctxd reads.
	for k := range d.Spec.Template.Metadata.Annotations {
		require.NotContains(t, k, "prometheus.io/", "a scrape without the token gets 401")
	}
	var token struct{ Name, Key string }
	for _, e := range c.Env {
		if e.Name == "CTXD_HTTP_TOKEN" {
			token.Name, token.Key = e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
		}
	}
	require.NotEmpty(t, token.Name)
	var pm struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Endpoints []struct {
				Port          string `yaml:"port"`
				Path          string `yaml:"path"`
				Authorization struct {
					Type        string `yaml:"type"`
					Credentials struct {
						Name string `yaml:"name"`
						Key  string `yaml:"key"`
					} `yaml:"credentials"`
				} `yaml:"authorization"`
			} `yaml:"podMetricsEndpoints"`
		} `yaml:"spec"`
	}
	mon, err := os.ReadFile("k8s/monitoring.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(mon, &pm))
	require.Equal(t, "PodMonitor", pm.Kind)
	require.Equal(t, map[string]string{"app": "ctxd"}, pm.Spec.Selector.MatchLabels)
	require.Len(t, pm.Spec.Endpoints, 1)
	ep := pm.Spec.Endpoints[0]
	require.Equal(t, c.Ports[0].Name, ep.Port)
	require.Equal(t, "/metrics", ep.Path)
	require.Equal(t, "Bearer", ep.Authorization.Type)
	require.Equal(t, token.Name, ep.Authorization.Credentials.Name)
	require.Equal(t, token.Key, ep.Authorization.Credentials.Key)
	require.Equal(t, c.Ports[0].Name, c.LivenessProbe.HTTPGet.Port)
	require.Equal(t, c.Ports[0].Name, c.ReadinessProbe.HTTPGet.Port)

	// The memory request holds the caches ctxd is told to fill.
	// (the projections and the rendered replies kept with them).
	cache, err := strconv.ParseInt(args["--cache-bytes"], 10, 64)
	require.NoError(t, err)
	mem := c.Resources.Requests["memory"]
	require.True(t, strings.HasSuffix(mem, "Mi"), mem)
	mib, err := strconv.ParseInt(strings.TrimSuffix(mem, "Mi"), 10, 64)
	require.NoError(t, err)
	require.Greater(t, mib<<20, cache+(128<<20), "memory request %s under the caches plus 128 MiB", mem)
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

func TestSystemd(t *testing.T) {
	data, err := os.ReadFile("systemd/ctxd.service")
	require.NoError(t, err)
	unit := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			unit[k] = v
		}
	}
	require.Equal(t, "notify", unit["Type"], "ctxd sends READY=1")
	require.Equal(t, "yes", unit["DynamicUser"])
	require.Equal(t, "ctxd", unit["StateDirectory"])
	require.Contains(t, unit["ExecStart"], "--data /var/lib/ctxd")
}

// TestGrafanaDashboard: the dashboard is JSON and uses only metrics ctxd
// exports.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("grafana/ctxd.json")
	require.NoError(t, err)
	var d map[string]any
	require.NoError(t, json.Unmarshal(data, &d))
	m := ops.NewMetrics(ops.Source{Stats: func() store.Stats { return store.Stats{} }, Conn: func() *nats.Conn { return nil }})
	m.Observe("context", "200", 0)
	families, err := m.Registry.Gather()
	require.NoError(t, err)
	have := map[string]bool{"ctxd_ingest_lag_records": true, "ctxd_nats_connected": true, "ctxd_nats_reconnects_total": true} // need a stream and a connection
	for _, f := range families {
		have[f.GetName()] = true
	}
	used := regexp.MustCompile(`\b(ctxd|go|process)_[a-z_]+`).FindAllString(string(data), -1)
	require.NotEmpty(t, used)
	for _, name := range used {
		base := strings.TrimSuffix(name, "_bucket")
		require.True(t, have[base], "the dashboard uses %s, which ctxd does not export", name)
	}
}

// The Kubernetes deployment runs more than one ctxd and rolls them one
// at a time without ever running fewer; compose runs two ctxd beside a
// 3-node cluster, each given every node.
func TestManifestsParse(t *testing.T) {
	data, err := os.ReadFile("k8s/ctxd.yaml")
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	kinds := map[string]map[string]any{}
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		kinds[doc["kind"].(string)] = doc
	}
	dep := kinds["Deployment"]
	require.NotNil(t, dep)
	spec := dep["spec"].(map[string]any)
	require.GreaterOrEqual(t, spec["replicas"].(int), 2)
	strategy := spec["strategy"].(map[string]any)
	require.Equal(t, "RollingUpdate", strategy["type"])
	require.Equal(t, 0, strategy["rollingUpdate"].(map[string]any)["maxUnavailable"])
	require.NotNil(t, kinds["PodDisruptionBudget"])

	data, err = os.ReadFile("compose/compose.yaml")
	require.NoError(t, err)
	var compose struct {
		Services map[string]struct {
			Command   []string `yaml:"command"`
			DependsOn []string `yaml:"depends_on"`
		} `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(data, &compose))
	var ctxd, nodes int
	for name, svc := range compose.Services {
		switch {
		case strings.HasPrefix(name, "ctxd"):
			ctxd++
			require.Equal(t, "serve", svc.Command[0], name)
			require.Contains(t, svc.Command, "nats://n1:4222,nats://n2:4222,nats://n3:4222", name)
			require.ElementsMatch(t, []string{"n1", "n2", "n3"}, svc.DependsOn, name)
		default:
			nodes++
		}
	}
	require.Equal(t, 2, ctxd)
	require.Equal(t, 3, nodes)
}

// protected are the subjects by which a value gets into ctxd's buckets,
// or leaves them: only ctxd's user may publish there. A snapshot or a
// checkpoint is served as it is read; its checksums detect damage, not
// a writer who recomputes them.
var protected = []string{
	"$KV.CTXD_SNAPSHOTS.forged",
	"$KV.CTXD_CHECKPOINTS.forged",
	"$JS.API.STREAM.PURGE.KV_CTXD_SNAPSHOTS",
	"$JS.API.STREAM.MSG.DELETE.KV_CTXD_CHECKPOINTS",
	"$JS.API.STREAM.UPDATE.KV_CTXD_SNAPSHOTS",
	"$JS.API.STREAM.DELETE.KV_CTXD_SNAPSHOTS",
	"$JS.API.STREAM.CREATE.KV_CTXD_SNAPSHOTS",
	"$JS.API.STREAM.MSG.GET.KV_CTXD_SNAPSHOTS",
	"$JS.API.DIRECT.GET.KV_CTXD_SNAPSHOTS",
	"$JS.API.CONSUMER.CREATE.KV_CTXD_CHECKPOINTS",
}

// serverPasswords are the passwords the shipped server configurations
// read from the environment.
var serverPasswords = map[string]string{
	"CTXD_PASSWORD": "ctxd-pw", "APP_PASSWORD": "app-pw", "OPERATOR_PASSWORD": "operator-pw",
	"CTXD_A_PASSWORD": "ctxd-a-pw", "APP_A_PASSWORD": "app-a-pw", "OPS_A_PASSWORD": "ops-a-pw",
	"CTXD_B_PASSWORD": "ctxd-b-pw", "APP_B_PASSWORD": "app-b-pw", "OPS_B_PASSWORD": "ops-b-pw",
	"SYS_PASSWORD": "sys-pw",
}

// TestServerConfigs_Trust runs every shipped nats-server configuration
// in a real server (ports, store and routes moved to the test's) and
// checks, for each: monitoring listens on loopback only; no connection
// without credentials; only ctxd's user may publish where ctxd's
// buckets are written or read ($KV.CTXD_*, the JetStream API of their
// streams); every other user may subscribe only to an inbox prefix of
// its own, _INBOX_<user>, and not to nats.go's default one.
func TestServerConfigs_Trust(t *testing.T) {
	for k, v := range serverPasswords {
		t.Setenv(k, v)
	}
	files, err := filepath.Glob("nats/*.conf")
	require.NoError(t, err)
	files = append(files, "tenants/nats.conf")
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			opts, err := server.ProcessConfigFile(f)
			require.NoError(t, err)
			monitored := opts.HTTPPort != 0
			opts.Port, opts.StoreDir, opts.JetStream = -1, t.TempDir(), false
			if monitored {
				opts.HTTPPort = -1
			}
			opts.Cluster, opts.Routes = server.ClusterOpts{}, nil
			opts.NoLog, opts.NoSigs = true, true
			s, err := server.NewServer(opts)
			require.NoError(t, err)
			go s.Start()
			t.Cleanup(s.Shutdown)
			require.True(t, s.ReadyForConnections(10*time.Second))
			if monitored {
				require.True(t, s.MonitorAddr().IP.IsLoopback(), "monitoring on %s: it lists every user, subscription and stream to whoever reaches it", s.MonitorAddr())
			}
			url := s.ClientURL()

			nc, err := nats.Connect(url)
			if err == nil {
				nc.Close()
			}
			require.Error(t, err, "a connection without credentials may write $KV.CTXD_* and read every inbox")

			var users int
			for _, u := range opts.Users {
				if u.Account != nil && u.Account.Name == opts.SystemAccount {
					continue // the system account holds no bucket of ctxd
				}
				users++
				log := &natstest.PermissionLog{}
				nc, err := nats.Connect(url, nats.UserInfo(u.Username, u.Password), nats.ErrorHandler(log.Handler))
				require.NoError(t, err, u.Username)
				t.Cleanup(nc.Close)
				if strings.HasPrefix(u.Username, "ctxd") {
					continue // ctxd's user: its account's everything
				}
				require.NotNil(t, u.Permissions, u.Username)
				require.NotNil(t, u.Permissions.Subscribe, u.Username)
				require.Equal(t, []string{"_INBOX_" + u.Username + ".>"}, u.Permissions.Subscribe.Allow, "%s subscribes to its own inbox prefix only", u.Username)
				for _, subj := range protected {
					require.NoError(t, nc.Publish(subj, []byte("forged")))
				}
				_, err = nc.SubscribeSync("_INBOX.>")
				require.NoError(t, err)
				require.NoError(t, nc.Flush())
				for _, subj := range append(protected, "_INBOX.>") {
					require.Eventually(t, func() bool { return log.Refused(subj) }, 10*time.Second, 10*time.Millisecond, "%s may use %s", u.Username, subj)
				}
			}
			require.Positive(t, users)
		})
	}
}
