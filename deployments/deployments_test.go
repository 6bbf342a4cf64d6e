// Package deployments holds ctxd's deployment files; its tests check that
// the NATS configurations and the manifests parse.
package deployments

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func TestNATSConfigsParse(t *testing.T) {
	files, err := filepath.Glob("nats/*.conf")
	require.NoError(t, err)
	require.Len(t, files, 4)
	for _, f := range files {
		opts, err := server.ProcessConfigFile(f)
		require.NoError(t, err, f)
		require.True(t, opts.JetStream, f)
		require.True(t, opts.SyncAlways, f)
		require.Equal(t, int32(8<<20), opts.MaxPayload, f)
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
