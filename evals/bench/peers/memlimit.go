package main

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultDocketMemoryLimit is the soft memory limit the docket child runs
// with when GOMEMLIMIT is unset: what ledger/badgerdb's documentation tells
// an application embedding docket to set for the ledger (the child needs
// little else), so that the child measures docket as it is meant to be run.
// -docket-memory-limit off measures it without one.
const defaultDocketMemoryLimit = 96 << 20

// docketMemoryLimit is the soft limit a child of side applies: the
// configured one for the docket side (Badger ledger) when GOMEMLIMIT is
// unset, else none (0: the Go runtime's own, from GOMEMLIMIT or unlimited).
// DBOS and docket-pg keep the runtime's default, as their users run them.
func docketMemoryLimit(side string, limit int64, getenv func(string) string) int64 {
	if side != "docket" || limit <= 0 || limit == math.MaxInt64 || getenv("GOMEMLIMIT") != "" {
		return 0
	}
	return limit
}

// applyMemoryLimit sets the child's soft memory limit (0: leave it) and
// returns the limit the child runs with.
func applyMemoryLimit(limit int64) int64 {
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	return debug.SetMemoryLimit(-1)
}

// parseMemoryLimit reads -docket-memory-limit: a size with an optional unit
// as GOMEMLIMIT spells them (B, KiB, MiB, GiB), or "off" (math.MaxInt64).
func parseMemoryLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "off" {
		return math.MaxInt64, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("-docket-memory-limit %q: want a size such as 128MiB, or off", s)
	}
	return n * mult, nil
}

// limitLabel writes a soft limit for people.
func limitLabel(n int64) string {
	switch {
	case n <= 0 || n == math.MaxInt64:
		return "none"
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
