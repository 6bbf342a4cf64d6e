package app

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Only bus talks JetStream: the runtime packages hold bus's handles, and
// bus knows no domain package but the checkpoint it stores.
func TestSeal(t *testing.T) {
	imports := func(dir string) []string {
		t.Helper()
		p, err := build.ImportDir(dir, 0)
		require.NoError(t, err)
		return p.Imports // production files only
	}
	const js = "github.com/nats-io/nats.go/jetstream"
	for _, dir := range []string{".", "../ownership", "../removals", "../server", "../store", "../../cmd/ctxd"} {
		require.NotContains(t, imports(dir), js, "%s imports JetStream: reach it through package bus", dir)
	}
	// Nor through a handle bus hands out: the service and its commands
	// call bus with the connection.
	for _, dir := range []string{".", "../ownership", "../removals", "../server", "../store", "../inspect", "../rebuild", "../importer", "../../cmd/ctxd"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NotContains(t, string(b), "bus.JetStream(", "%s takes a JetStream handle from bus", f)
		}
	}
	allowed := []string{"checkpoint", "subject"}
	for _, imp := range imports("../bus") {
		if rest, ok := strings.CutPrefix(imp, "github.com/ctxd/ctxd/pkg/"); ok {
			require.True(t, slices.Contains(allowed, rest), "bus imports %s: bus knows no domain package", imp)
		}
	}
}

// No production file grows past 650 lines: past that a file does more
// than one job, and its parts go to files of their own.
func TestFileSizes(t *testing.T) {
	const most = 650
	for _, root := range []string{"../../pkg", "../../cmd", "../../streams"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			n := strings.Count(string(b), "\n")
			require.LessOrEqual(t, n, most, "%s has %d lines: split it by job", path, n)
			return nil
		})
		require.NoError(t, err)
	}
}
