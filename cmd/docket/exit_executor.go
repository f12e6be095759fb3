package main

import (
	"errors"

	"github.com/docketrun/docket/executor"
)

func init() {
	// A replay that would build on an undone (compensated) action is bad
	// input: the person changes the plan or forks the run.
	exitMappers = append(exitMappers, func(err error) (int, bool) {
		if errors.Is(err, executor.ErrUndone) || errors.Is(err, executor.ErrNothingNamed) {
			return exitBad, true
		}
		return 0, false
	})
}
