package store

import (
	"testing"

	"github.com/ctxd/ctxd/internal/leakcheck"
)

// TestMain fails the tests when a goroutine of ctxd's code outlives them.
func TestMain(m *testing.M) { leakcheck.Main(m) }
