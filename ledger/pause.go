package ledger

import (
	"encoding/json"
	"fmt"
)

// SetPause records a person's pause of run runID (by is who paused it) or,
// with by == "", lifts it (an explicit resume).
//
// Pausing moves the run to paused, sets Run.PausedBy and appends event
// run.paused with data; a run paused by someone already is left as it is
// (an identical repeat is success, no event). Lifting clears PausedBy and,
// when the run was paused by a person, moves it to status (normally
// running) with event run.resumed and data; a run not paused by a person is
// left as it is. Completed, failed and cancelled runs are refused with a
// *ConflictError (nothing to pause or resume). Op errors: ErrNotFound (no
// such run), ErrInvalid (empty run id, bad data, a status that is not a
// run status), ErrConflict.
//
// Other status changes (SetRunStatus) to paused keep PausedBy, so that a
// drive that writes paused for another reason (an action needs review) while
// a person's pause holds does not lift it; a status change away from paused
// clears it (the pause is over).
func SetPause(runID, by string, status RunStatus, data json.RawMessage) Op {
	return Op{body: &setPauseOp{runID: runID, by: by, status: status, data: data}}
}

type setPauseOp struct {
	runID, by string
	status    RunStatus
	data      json.RawMessage
}

func (o *setPauseOp) kind() opKind               { return opSetPause }
func (o *setPauseOp) scope() (string, *bigValue) { return o.runID, nil }

func (o *setPauseOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := validID("run id", o.runID); err != nil {
		return errResult(err), nil
	}
	if err := validJSON("event data", o.data, false); err != nil {
		return errResult(err), nil
	}
	if o.by == "" && !o.status.valid() {
		return errResult(fmt.Errorf("%w: run status %q", ErrInvalid, o.status)), nil
	}
	run, ok, err := b.run(o.runID)
	if err != nil {
		return opFailure(err)
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	switch run.Status {
	case RunCompleted, RunFailed, RunCancelled:
		return Result{run: run.Run, Err: &ConflictError{RunID: o.runID, Op: opNames[opSetPause],
			Msg: fmt.Sprintf("the run is %s", run.Status)}}, nil
	}
	pausedByPerson := run.Status == RunPaused && run.PausedBy != ""
	var evType EventType
	if o.by != "" {
		if pausedByPerson {
			return Result{run: run.Run}, nil
		}
		run.Status, run.PausedBy, evType = RunPaused, o.by, EventRunPaused
	} else {
		if !pausedByPerson {
			if run.PausedBy != "" { // left over from a pause that another status change ended
				run.PausedBy = ""
				if err := b.touch(run); err != nil {
					return Result{}, err
				}
			}
			return Result{run: run.Run}, nil
		}
		run.Status, run.PausedBy, evType = o.status, "", EventRunResumed
	}
	if err := b.touch(run); err != nil {
		return Result{}, err
	}
	if err := b.event(o.runID, evType, "", o.data); err != nil {
		return Result{}, err
	}
	return Result{run: run.Run}, nil
}
