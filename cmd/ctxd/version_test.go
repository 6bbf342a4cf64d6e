package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersion_MakeBuild: make build stamps the version of the tree it is
// built from, where Go cannot (a linked git worktree, -buildvcs=false):
// ctxd version never says (devel) for it.
func TestVersion_MakeBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ctxd")
	}
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	if err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	// The command make build runs, writing elsewhere than bin/.
	dry, err := exec.Command("make", "-s", "-n", "-C", root, "build").Output()
	require.NoError(t, err)
	line := strings.TrimSpace(string(dry))
	require.Contains(t, line, " -o bin/ctxd ")
	bin := filepath.Join(t.TempDir(), "ctxd")
	cmd := exec.Command("sh", "-c", strings.Replace(line, " -o bin/ctxd ", " -o "+bin+" ", 1))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "version").Output()
	require.NoError(t, err)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	require.NotContains(t, string(out), "(devel)")
	require.Contains(t, string(out), "(commit "+string(head[:12]))
}
