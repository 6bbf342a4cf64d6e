package main

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1073741824": 1 << 30, "1GiB": 1 << 30, "512MiB": 512 << 20, "64KiB": 64 << 10,
		"2TiB": 2 << 40, "100B": 100, " 7 ": 7,
	} {
		got, err := parseBytes(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "1GB", "1.5GiB", "GiB", "lots", "9223372036854775807GiB", "1e9"} {
		_, err := parseBytes(in)
		require.Error(t, err, in)
		require.Contains(t, err.Error(), in)
	}
}

// The memory limit is --cache-bytes and a documented overhead, the
// embedded server's included when it runs in the process; a flag sets
// another or none, and GOMEMLIMIT wins over both.
func TestChooseMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		name, flag, env string
		cache           int64
		embedded        bool
		want            int64
		from            string
	}{
		{"auto, embedded", "auto", "", 1 << 30, true, under(1<<30 + 32<<20 + 64<<20 + 192<<20), "+ 32 MiB of digests' chains, less 1/32 of it"}, // a 32nd of the cache
		{"auto, small cache", "auto", "", 256 << 20, true, under(256<<20 + 16<<20 + 64<<20 + 192<<20), "embedded server"},                       // at least 16 MiB
		{"auto, external server", "auto", "", 1 << 30, false, under(1<<30 + 32<<20 + 64<<20), "--cache-bytes + 64 MiB"},
		{"auto, no cache bound", "auto", "", 0, true, 0, "--cache-bytes 0"},
		{"bytes", "2GiB", "", 1 << 30, true, 2 << 30, "--memory-limit"},
		{"off", "off", "", 1 << 30, true, 0, "off"},
		{"zero", "0", "", 1 << 30, true, 0, "--memory-limit 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := chooseMemoryLimit(c.flag, c.env, c.cache, c.embedded)
			require.NoError(t, err)
			require.Equal(t, c.want, got.bytes)
			require.Contains(t, got.from, c.from)
		})
	}
	t.Run("GOMEMLIMIT wins", func(t *testing.T) {
		old := debug.SetMemoryLimit(3 << 30)
		t.Cleanup(func() { debug.SetMemoryLimit(old) })
		got, err := chooseMemoryLimit("2GiB", "3GiB", 1<<30, true)
		require.NoError(t, err)
		require.Equal(t, memoryLimit{bytes: 3 << 30, from: "GOMEMLIMIT"}, got)
	})
	t.Run("bad value", func(t *testing.T) {
		_, err := chooseMemoryLimit("lots", "", 1<<30, true)
		require.ErrorContains(t, err, `--memory-limit: want a number of bytes such as 1073741824 or 1GiB, got "lots", auto or off`)
	})
}

// ctxd serve refuses a memory limit it cannot read, naming the flag,
// before it starts anything.
func TestServe_MemoryLimitFlag(t *testing.T) {
	code, _, errOut := runCmd(t, "", "serve", "--memory-limit", "1.5GB", "--data", t.TempDir(), "--port", "-1")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--memory-limit")
	code, _, errOut = runCmd(t, "", "serve", "--idle-release", "-1s", "--data", t.TempDir(), "--port", "-1")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--idle-release")
}

// returnWhenIdle returns when its context ends.
func TestReturnWhenIdle_Stops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); returnWhenIdle(ctx, 4*time.Millisecond) }()
	cancel()
	<-done
}

// under is the automatic limit for a bound: a 32nd below it.
func under(bound int64) int64 { return bound - bound/32 }
