package temporalstep

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Workflow's updates and query.
const (
	// UpdateApprove takes an ApproveRequest: approve the named actions that
	// wait for approval, then continue the run.
	UpdateApprove = "approve"
	// UpdateResolve takes a Resolution (its RunID may be empty: the
	// workflow's run): settle an action in needs_review, then continue.
	UpdateResolve = "resolve"
	// QueryResult answers the latest Result.
	QueryResult = "result"
)

// Activity timeouts Workflow sets unless its request says otherwise.
const (
	// DefaultStartToClose bounds one RunPlan attempt: the whole drive of the
	// plan until it completes or waits for a person.
	DefaultStartToClose = time.Hour
	// DefaultHeartbeat is RunPlan's HeartbeatTimeout: a worker that died is
	// noticed this long after its last heartbeat (RunPlan heartbeats every
	// third of it).
	DefaultHeartbeat = 30 * time.Second
)

// WorkflowRequest is Workflow's input.
type WorkflowRequest struct {
	Request
	// StartToClose is RunPlan's StartToCloseTimeout. Default
	// DefaultStartToClose.
	StartToClose time.Duration `json:"start_to_close,omitempty"`
	// Heartbeat is RunPlan's HeartbeatTimeout. Default DefaultHeartbeat.
	Heartbeat time.Duration `json:"heartbeat,omitempty"`
	// MaxAttempts caps the attempts of each activity (0: unlimited, as
	// Temporal's default). Bad requests and failed runs are never retried.
	MaxAttempts int32 `json:"max_attempts,omitempty"`
}

// ApproveRequest is UpdateApprove's argument.
type ApproveRequest struct {
	Actions []string `json:"actions"` // at least one; never "all" by omission
	By      string   `json:"by,omitempty"`
}

// Workflow runs a plan with the RunPlan activity and, while the run waits
// for a person, takes the UpdateApprove and UpdateResolve updates: each runs
// its activity (Approve, Resolve) and answers the caller with its error, if
// any; the workflow then continues the run with RunPlan. It returns the
// Result once the run completed; a failed run fails the workflow
// (ErrTypeRunFailed). A person's pause is not lifted here: the run stays
// waiting until it is resumed and then approved or resolved again.
//
// Register it with worker.RegisterWorkflow(temporalstep.Workflow) beside
// Activities.Register.
func Workflow(ctx workflow.Context, req WorkflowRequest) (Result, error) {
	retry := &temporal.RetryPolicy{MaximumAttempts: req.MaxAttempts, NonRetryableErrorTypes: []string{ErrTypeBadRequest, ErrTypeRunFailed}}
	hb := req.Heartbeat
	if hb == 0 {
		hb = DefaultHeartbeat
	}
	stc := req.StartToClose
	if stc == 0 {
		stc = DefaultStartToClose
	}
	runCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: stc, HeartbeatTimeout: hb, RetryPolicy: retry})
	reviewCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, RetryPolicy: retry})

	var last Result
	changed := false // a review decision was recorded since RunPlan last started
	if err := workflow.SetQueryHandler(ctx, QueryResult, func() (Result, error) { return last, nil }); err != nil {
		return Result{}, err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateApprove, func(ctx workflow.Context, a ApproveRequest) error {
		if err := workflow.ExecuteActivity(reviewCtx, ActivityApprove, last.RunID, a.Actions, a.By).Get(ctx, nil); err != nil {
			return err
		}
		changed = true
		return nil
	}, workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, a ApproveRequest) error {
		switch {
		case last.RunID == "":
			return errors.New("the run is not recorded yet")
		case len(a.Actions) == 0:
			return errors.New("approve names no action")
		}
		return nil
	}})
	if err != nil {
		return Result{}, err
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateResolve, func(ctx workflow.Context, r Resolution) error {
		if r.RunID == "" {
			r.RunID = last.RunID
		}
		if err := workflow.ExecuteActivity(reviewCtx, ActivityResolve, r).Get(ctx, nil); err != nil {
			return err
		}
		changed = true
		return nil
	}, workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, r Resolution) error {
		n := 0
		for _, set := range []bool{len(r.Done) > 0, r.Retry, r.Skip} {
			if set {
				n++
			}
		}
		switch {
		case last.RunID == "":
			return errors.New("the run is not recorded yet")
		case r.RunID != "" && r.RunID != last.RunID:
			return errors.New("the resolution names another run than this workflow's")
		case r.ActionID == "":
			return errors.New("resolve names no action")
		case n != 1:
			return errors.New("give exactly one of done (with an output), retry or skip")
		}
		return nil
	}})
	if err != nil {
		return Result{}, err
	}

	run := req.Request
	for {
		changed = false
		var res Result
		if err := workflow.ExecuteActivity(runCtx, ActivityRunPlan, run).Get(ctx, &res); err != nil {
			return last, err
		}
		last = res
		if !res.Waiting() {
			break
		}
		run.RunID, run.Plan = res.RunID, nil // continue the recorded run
		if err := workflow.Await(ctx, func() bool { return changed }); err != nil {
			return last, err
		}
	}
	// Answer updates still being handled before the workflow ends.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return last, err
	}
	return last, nil
}
