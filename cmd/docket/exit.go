package main

import (
	"errors"
	"flag"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
)

// exitCode maps an error to the process exit code (cmd/docket/README.md, Exit codes).
// Package-level sentinel errors (ledger.ErrLocked → 4, plan/tools input errors
// → 2, ...) are mapped by exitMappers.
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

// exitNoSpace (5) is a full file system under the data directory
// (ledger.ErrNoSpace): retryable once space is freed, and nothing
// acknowledged was lost; the same command again resumes. It is not 4: busy
// passes by itself (the other process finishes) and its advice (go through
// --server) is wrong here, while a full disk needs someone to free space, so
// a workflow engine may retry both but should alert on 5.
const exitNoSpace = 5

// exitSentUnknown (6) is a request to a running service (--server URL) that
// was sent, or a run it accepted, whose outcome this command could not see:
// the connection broke after the request was written, or the service went
// away (restarting, shutting down) before the run settled. The run may have
// been recorded and its calls made; the message names the run. It is not 4
// ("nothing was sent", retry freely) and not 1 (nothing is known to have
// failed): look at the run (docket runs show --server URL RUN) or run the
// same command again once the service is back, which repeats nothing.
const exitSentUnknown = 6

// exitWaiting (7) is a run that waits for an action's time (not_before,
// after) and nothing else: no person needs to act, so it is not 3. The
// message says until when; the same command again at or after that time
// (or docket serve, which wakes the run) continues it.
const exitWaiting = 7

// exitMappers let packages' sentinel errors choose exit codes; each command
// file may append one in init.
var exitMappers = []func(error) (int, bool){packageErrorCode}

// packageErrorCode maps the errors of the packages cmd wires together:
// a data directory held by another process, or a shared ledger whose
// database cannot be reached, is "busy" (4), one whose file
// system is full is "no space" (5); a plan that is
// invalid, differs from the one recorded under the same run id, was made for
// other tool definitions, names an unknown run, or asks for a transition the
// action's state does not allow, or carries an id the ledger refuses, is
// "bad input" (2).
func packageErrorCode(err error) (int, bool) {
	switch {
	case errors.Is(err, ledger.ErrLocked), errors.Is(err, ledger.ErrUnavailable):
		return exitBusy, true
	case errors.Is(err, ledger.ErrNoSpace):
		return exitNoSpace, true
	case errors.Is(err, executor.ErrPlanMismatch),
		errors.Is(err, executor.ErrInvalidPlan),
		errors.Is(err, executor.ErrToolsChanged),
		errors.Is(err, executor.ErrNotReviewable),
		errors.Is(err, ledger.ErrApproverRefused),
		errors.Is(err, ledger.ErrNotFound),
		errors.Is(err, ledger.ErrInvalid),
		errors.Is(err, tools.ErrUnknownTool):
		return exitBad, true
	}
	var pe plan.Errors
	if errors.As(err, &pe) {
		return exitBad, true
	}
	var ae *tools.ArgsError
	if errors.As(err, &ae) {
		return exitBad, true
	}
	return 0, false
}
