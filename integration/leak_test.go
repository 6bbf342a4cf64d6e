package integration

import (
	"os"
	"testing"

	"github.com/ctxd/ctxd/internal/leakcheck"
)

// TestMain fails the tests when a goroutine of ctxd's code outlives them.
// Run with bareEnv set, the binary is a bare responder (bare_test.go).
func TestMain(m *testing.M) {
	if args := os.Getenv(bareEnv); args != "" {
		runBare(args)
	}
	leakcheck.Main(m)
}
