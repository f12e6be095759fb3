package main

import (
	"errors"
	"flag"
)

// exitCode maps an error to the process exit code (DESIGN.md contracts).
// Package-level sentinel errors (ledger.ErrLocked → 4, plan/tools input errors
// → 2, ...) are mapped here as the packages land.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	for _, m := range exitMappers {
		if code, ok := m(err); ok {
			return code
		}
	}
	return exitFailed
}

// exitMappers let packages' sentinel errors choose exit codes; each command
// file may append one in init.
var exitMappers []func(error) (int, bool)
