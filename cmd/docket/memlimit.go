package main

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultServeMemoryLimit is the soft memory limit of `docket serve` when
// neither --memory-limit nor GOMEMLIMIT says otherwise: the Go runtime
// collects garbage harder as the heap nears it (never more than about half
// the CPU: it is soft, not a cap that fails allocations). Badger's memtables
// and table builders are on the Go heap, so without a limit its peak grows
// with the bytes written per burst (README, Performance).
const defaultServeMemoryLimit = 128 << 20

// memoryLimit decides the process's soft memory limit from --memory-limit
// (flagVal, "" when not given) and $GOMEMLIMIT: the flag wins, then the
// environment (the Go runtime already applied it), then the default. It
// returns the limit in bytes (math.MaxInt64: none) and where it came from.
func memoryLimit(flagVal string, getenv func(string) string) (int64, string, error) {
	if flagVal != "" {
		n, err := parseMemoryLimit(flagVal)
		if err != nil {
			return 0, "", usageError("--memory-limit %q: %v", flagVal, err)
		}
		return n, "--memory-limit", nil
	}
	if env := getenv("GOMEMLIMIT"); env != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT", nil
	}
	return defaultServeMemoryLimit, "default", nil
}

// setMemoryLimit sets the soft memory limit and returns what sets the
// previous one again (serve runs in process in tests).
func setMemoryLimit(n int64) (restore func()) {
	prev := debug.SetMemoryLimit(n)
	return func() { debug.SetMemoryLimit(prev) }
}

// handBackStartupGarbage collects and hands the freed memory back to the OS
// at once: setting up (tools file, schemas, policies, the ledger's open)
// leaves garbage that the runtime's scavenger would return only slowly, so
// that an idle server's resident set is what it keeps (≈0.4 MiB less, README).
func handBackStartupGarbage() { debug.FreeOSMemory() }

// parseMemoryLimit reads a size: a number of bytes with an optional unit
// (B, KiB, MiB, GiB, TiB, as GOMEMLIMIT spells them), or "off" (no limit).
func parseMemoryLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "off" {
		return math.MaxInt64, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive size such as 256MiB or 1GiB, or off")
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("too large")
	}
	return n * mult, nil
}

// sizeLabel writes a limit for people: "128 MiB", "none".
func sizeLabel(n int64) string {
	switch {
	case n == math.MaxInt64:
		return "none"
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
