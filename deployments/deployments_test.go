// Package deployments holds ctxd's deployment files; its test checks that
// the NATS configurations parse.
package deployments

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

func TestNATSConfigsParse(t *testing.T) {
	t.Setenv("CTXD_PASSWORD", "pw1")
	t.Setenv("APP_PASSWORD", "pw2")
	files, err := filepath.Glob("nats/*.conf")
	require.NoError(t, err)
	require.Len(t, files, 5)
	for _, f := range files {
		opts, err := server.ProcessConfigFile(f)
		require.NoError(t, err, f)
		require.True(t, opts.JetStream, f)
		require.True(t, opts.SyncAlways, f)
		require.Equal(t, int32(8<<20), opts.MaxPayload, f)
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
