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
	runCtx, reviewCtx := activityContexts(ctx, req)
	rv := &review{ctx: reviewCtx}
	if err := rv.register(ctx); err != nil {
		return Result{}, err
	}
	run := req.Request
	for {
		rv.changed = false
		var res Result
		if err := workflow.ExecuteActivity(runCtx, ActivityRunPlan, run).Get(ctx, &res); err != nil {
			return rv.last, err
		}
		rv.last = res
		if !res.Waiting() {
			break
		}
		run.RunID, run.Plan = res.RunID, nil // continue the recorded run
		if err := workflow.Await(ctx, func() bool { return rv.changed }); err != nil {
			return rv.last, err
		}
	}
	// Answer updates still being handled before the workflow ends.
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return rv.last, err
	}
	return rv.last, nil
}

// activityContexts are the contexts of Workflow's activities: RunPlan's,
// with req's timeouts (or the defaults), and Approve's and Resolve's. Bad
// requests and failed runs are never retried.
func activityContexts(ctx workflow.Context, req WorkflowRequest) (run, review workflow.Context) {
	retry := &temporal.RetryPolicy{MaximumAttempts: req.MaxAttempts, NonRetryableErrorTypes: []string{ErrTypeBadRequest, ErrTypeRunFailed}}
	hb := req.Heartbeat
	if hb == 0 {
		hb = DefaultHeartbeat
	}
	stc := req.StartToClose
	if stc == 0 {
		stc = DefaultStartToClose
	}
	run = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: stc, HeartbeatTimeout: hb, RetryPolicy: retry})
	review = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, RetryPolicy: retry})
	return run, review
}

// review is what Workflow shares with its query and update handlers.
type review struct {
	ctx     workflow.Context // Approve's and Resolve's activity options
	last    Result           // the latest Result (QueryResult)
	changed bool             // a review decision was recorded since RunPlan last started
}

// register sets the query and update handlers of Workflow.
func (rv *review) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryResult, func() (Result, error) { return rv.last, nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateApprove, rv.approve, workflow.UpdateHandlerOptions{Validator: rv.validApprove}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateResolve, rv.resolve, workflow.UpdateHandlerOptions{Validator: rv.validResolve})
}

// approve is UpdateApprove: the Approve activity, then the run continues.
func (rv *review) approve(ctx workflow.Context, a ApproveRequest) error {
	if err := workflow.ExecuteActivity(rv.ctx, ActivityApprove, rv.last.RunID, a.Actions, a.By).Get(ctx, nil); err != nil {
		return err
	}
	rv.changed = true
	return nil
}

func (rv *review) validApprove(ctx workflow.Context, a ApproveRequest) error {
	switch {
	case rv.last.RunID == "":
		return errors.New("the run is not recorded yet")
	case len(a.Actions) == 0:
		return errors.New("approve names no action")
	}
	return nil
}

// resolve is UpdateResolve: the Resolve activity (on the workflow's run when
// r names none), then the run continues.
func (rv *review) resolve(ctx workflow.Context, r Resolution) error {
	if r.RunID == "" {
		r.RunID = rv.last.RunID
	}
	if err := workflow.ExecuteActivity(rv.ctx, ActivityResolve, r).Get(ctx, nil); err != nil {
		return err
	}
	rv.changed = true
	return nil
}

func (rv *review) validResolve(ctx workflow.Context, r Resolution) error {
	n := 0
	for _, set := range []bool{len(r.Done) > 0, r.Retry, r.Skip} {
		if set {
			n++
		}
	}
	switch {
	case rv.last.RunID == "":
		return errors.New("the run is not recorded yet")
	case r.RunID != "" && r.RunID != rv.last.RunID:
		return errors.New("the resolution names another run than this workflow's")
	case r.ActionID == "":
		return errors.New("resolve names no action")
	case n != 1:
		return errors.New("give exactly one of done (with an output), retry or skip")
	}
	return nil
}
