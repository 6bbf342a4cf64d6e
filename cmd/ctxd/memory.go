package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/pkg/app"
)

// memoryBase is what ctxd holds beside its caches and the chains of
// digests: the runtime and its idle heap (about 20 MiB), the connections'
// buffers, records and replies in flight.
const memoryBase = 64 << 20

// embeddedBase is what the embedded NATS server holds in the same heap
// at most under load: the JetStream store's caches of the blocks
// recently written and read (each expires 10 s after its last use), the
// subjects' index, and its clients' buffers (docs/OPERATING.md,
// "Memory").
const embeddedBase = 192 << 20

// memoryBound is the memory a ctxd serve process stays within: its
// caches (--cache-bytes: the projections and the rendered replies kept
// with them), the chains of digests (app.DigestBytes: every reply
// carries its digest, so they fill to their bound under any steady
// load), memoryBase, and embeddedBase with the embedded server.
func memoryBound(cacheBytes int64, embedded bool) int64 {
	n := max(cacheBytes, 0) + app.DigestBytes(cacheBytes) + memoryBase
	if embedded {
		n += embeddedBase
	}
	return n
}

// parseBytes reads a size: a whole number of bytes, or one with a unit
// as GOMEMLIMIT writes them (B, KiB, MiB, GiB, TiB).
func parseBytes(s string) (int64, error) {
	num, mult := s, int64(1)
	for i, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if n, ok := strings.CutSuffix(s, unit); ok {
			num, mult = n, int64(1)<<(10*(i+1))
			break
		}
	}
	if n, ok := strings.CutSuffix(num, "B"); ok && mult == 1 {
		num = n
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("want a number of bytes such as 1073741824 or 1GiB, got %q", s)
	}
	return n * mult, nil
}

// memoryLimit is the Go runtime's soft memory limit ctxd serve sets,
// and where it comes from.
type memoryLimit struct {
	bytes int64 // 0: none
	from  string
}

// limitRoom is the share of memoryBound the automatic limit leaves
// below it: the limit is soft, and the runtime's memory runs a few MiB
// past it at times (a 5-minute soak with a limit at the bound went 2 to
// 4 MiB over it), so that a limit at the bound itself would not keep
// the resident size within it.
const limitRoom = 32

// autoLimit is the memory limit of --memory-limit auto: memoryBound,
// less a limitRoom-th of it.
func autoLimit(cacheBytes int64, embedded bool) int64 {
	b := memoryBound(cacheBytes, embedded)
	return b - b/limitRoom
}

// chooseMemoryLimit decides the memory limit: GOMEMLIMIT wins (the
// runtime read it already), then --memory-limit, whose "auto" is
// autoLimit of the configuration and "off" is none. With a limit, the
// garbage collector runs before the heap grows past it, instead of
// letting garbage double the live heap first (GOGC=100), and the
// runtime returns the memory above it to the system.
func chooseMemoryLimit(flagValue, env string, cacheBytes int64, embedded bool) (memoryLimit, error) {
	if env != "" {
		return memoryLimit{bytes: debug.SetMemoryLimit(-1), from: "GOMEMLIMIT"}, nil
	}
	switch flagValue {
	case "off":
		return memoryLimit{from: "--memory-limit off"}, nil
	case "auto", "":
		if cacheBytes <= 0 {
			return memoryLimit{from: "--cache-bytes 0 (no bound)"}, nil
		}
		from := "--cache-bytes + 64 MiB"
		if embedded {
			from = "--cache-bytes + 64 MiB + 192 MiB for the embedded server"
		}
		from += fmt.Sprintf(" + %d MiB of digests' chains, less 1/%d of it", app.DigestBytes(cacheBytes)>>20, limitRoom)
		return memoryLimit{bytes: autoLimit(cacheBytes, embedded), from: from}, nil
	}
	n, err := parseBytes(flagValue)
	if err != nil {
		return memoryLimit{}, fmt.Errorf("--memory-limit: %w, auto or off", err)
	}
	if n == 0 {
		return memoryLimit{from: "--memory-limit 0"}, nil
	}
	return memoryLimit{bytes: n, from: "--memory-limit"}, nil
}

// returnWhenIdle gives the heap's free memory back to the system once
// the process has allocated less than quietBytes for quiet: after a
// load, the runtime keeps what it used until a collection runs and its
// scavenger, paced at about 1% of a CPU, gets round to it, and with no
// allocation a collection runs only every two minutes. It returns when
// ctx ends.
func returnWhenIdle(ctx context.Context, quiet time.Duration) {
	const quietBytes = 4 << 20
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocs := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
	tick := time.NewTicker(quiet / 4)
	defer tick.Stop()
	last, since, given := allocs(), time.Now(), true
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			a := allocs()
			if a-last >= quietBytes {
				last, since, given = a, now, false
				continue
			}
			if !given && now.Sub(since) >= quiet {
				debug.FreeOSMemory()
				last, given = allocs(), true
			}
		}
	}
}
