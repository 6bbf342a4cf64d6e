package integration

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ctxd/ctxd/internal/natstest"
)

// owners maps each partition to the instances (by pid) that say they
// apply it.
func (tc *testCluster) owners() map[int][]int {
	out := map[int][]int{}
	for _, s := range tc.stats() {
		i := strings.LastIndex(s.Instance, ":")
		pid, _ := strconv.Atoi(s.Instance[i+1:])
		for _, k := range s.Partitions {
			out[k] = append(out[k], pid)
		}
	}
	return out
}

// settle waits until every partition is applied by exactly one instance,
// none with more than ceil(P / instances), and returns the owners and
// how long that took.
func (tc *testCluster) settle() (map[int]int, time.Duration) {
	start := time.Now()
	var last map[int][]int
	var owner map[int]int
	require.Eventually(tc.t, func() bool {
		last = tc.owners()
		n := len(tc.instances())
		target := (tc.partitions + n - 1) / n
		owner = map[int]int{}
		per := map[int]int{}
		for k := range tc.partitions {
			if len(last[k]) != 1 {
				return false
			}
			owner[k] = last[k][0]
			per[last[k][0]]++
		}
		for _, c := range per {
			if c > target {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every partition applied by one instance")
	return owner, time.Since(start)
}

// moved counts the partitions whose owner changed.
func moved(before, after map[int]int) int {
	n := 0
	for k, o := range after {
		if before[k] != o {
			n++
		}
	}
	return n
}

// Three instances on a 3-node cluster, a stream of 16 partitions, under
// publishes and read-your-writes reads: after settling every partition is
// applied by exactly one instance, at most ceil(16/N) each; an instance
// joins, one stops, one is killed (SIGKILL), one stalls past the pinned
// TTL so that another takes its partitions while it still thinks it holds
// them (two instances applying a partition at once) and comes back. Every
// reply equals Build over its session's records up to its seq, at or past
// its min_seq; no record is lost, duplicated or reordered; rebuild
// --check finds nothing. The partitions moved per event are printed.
func TestPartitions_Balance(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of load on a cluster; -short (the race detector's run) leaves it to the plain run")
	}
	c := natstest.StartCluster(t, 3)
	tc := onClusterP(t, c, "p", 1, 16)
	// The first instance makes the stream and its consumers; then the others.
	tc.startInstance()
	tc.startInstance()
	tc.load(*clusterWriters, 64)
	owners, took := tc.settle()
	t.Logf("3 instances: settled in %v; partitions per instance %v", took.Round(time.Millisecond), perInstance(owners))

	event := func(name string, do func() time.Time) {
		at := do()
		after, _ := tc.settle()
		t.Logf("%s: %d partitions moved, settled %v after; per instance %v", name, moved(owners, after), time.Since(at).Round(time.Millisecond), perInstance(after))
		owners = after
	}
	event("an instance joins (4)", func() time.Time { tc.startInstance(); return time.Now() })
	event("an instance stops (SIGTERM, 3)", func() time.Time {
		in := tc.instances()[0]
		at := time.Now()
		tc.term(in)
		return at
	})
	event("an instance is killed (SIGKILL, 2)", func() time.Time {
		in := tc.instances()[0]
		at := time.Now()
		tc.kill(in)
		return at
	})
	event("an instance joins (3)", func() time.Time { tc.startInstance(); return time.Now() })
	event("an instance stalls past the pinned TTL and comes back", func() time.Time {
		in := tc.instances()[0]
		at := time.Now()
		require.NoError(t, in.p.cmd.Process.Signal(syscall.SIGSTOP))
		time.Sleep(5 * time.Second) // past the 3 s pinned TTL: the others take its partitions
		require.NoError(t, in.p.cmd.Process.Signal(syscall.SIGCONT))
		return at
	})
	time.Sleep(*clusterLoadFor)
	tc.finish()
	for _, in := range tc.instances() {
		tc.term(in)
	}
}

// perInstance counts the partitions of each owner, sorted.
func perInstance(owner map[int]int) string {
	per := map[int]int{}
	for _, o := range owner {
		per[o]++
	}
	var counts []int
	for _, c := range per {
		counts = append(counts, c)
	}
	slices.Sort(counts)
	return fmt.Sprint(counts)
}
