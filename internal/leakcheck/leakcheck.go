// Package leakcheck fails a test binary whose tests leave goroutines of
// ctxd's own code running after they end: a goroutine no Close joins
// outlives its test, and may fail a later one (a t.Errorf after its test
// ended panics the binary) or keep a connection to a server another
// test started.
//
// A package that runs services calls it from TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
//
// After the tests pass, it waits a few seconds for goroutines with a
// frame in a ctxd package (github.com/ctxd/ctxd/, the test binary's own
// goroutines and testing's aside) to end, and fails with their stacks if
// any remain. Goroutines of the libraries alone (an embedded server's,
// nats.go's) are not counted: they are those libraries' to join, and a
// ctxd goroutine that holds them shows up itself.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Grace is how long Main waits for goroutines to end after the tests.
var Grace = 5 * time.Second

// Main runs the tests, then fails the binary if goroutines of ctxd's
// code outlive them.
func Main(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if left := wait(Grace); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "leakcheck: %d goroutine(s) of ctxd's code outlived the tests:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// wait returns the goroutines of ctxd's code still running after grace.
func wait(grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		left := Running()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Running returns the stacks of the goroutines running a function of
// ctxd's code, other than the caller's and testing's own.
func Running() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // the caller's
			continue
		}
		if ours(g) {
			out = append(out, g)
		}
	}
	return out
}

// ours reports whether a goroutine's stack runs a function of ctxd's
// code ("created by" lines aside: a server a test started is the
// server's, not the test's).
func ours(stack string) bool {
	for _, line := range strings.Split(stack, "\n") {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "created by ") || strings.HasPrefix(line, "goroutine ") {
			continue
		}
		if strings.HasPrefix(line, "github.com/ctxd/ctxd/") {
			return true
		}
	}
	return false
}
