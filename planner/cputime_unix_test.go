//go:build unix

package planner_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) this process used so far; on a
// loaded machine it measures the planner's work better than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
