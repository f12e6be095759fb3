// Package temporalstep runs docket plans as a Temporal activity, so that a
// Temporal workflow can hand a plan of agent actions to docket and rely on
// every action happening exactly once in effect, whatever Temporal retries.
//
// It lives in its own Go module (executor/temporalstep, with a replace to the
// main module) so that docket itself does not carry Temporal's dependencies.
//
// # How it works
//
// A worker builds one *Activities over its data directory (New) and registers
// its RunPlan method. RunPlan records the plan under a run id derived from the
// activity's stable identity, "temporal/<workflow id>/<activity id>" (both
// survive activity retries and workflow replays), unless the request names
// one, and drives it with the executor. When Temporal retries the activity
// (the worker crashed, the attempt timed out), the retry finds the run in the
// ledger and resumes it: succeeded actions return their recorded outputs, and
// an action whose outcome was lost is handled by its effect class (keyed: the
// same key again; lookup: look first; at_most_once: wait for a person).
//
// RunPlan returns the run's Result whatever its status; a run that waits for
// a person (paused or awaiting approval) is a successful activity result, so
// the workflow can wait for a signal and call RunPlan again with the same
// request (or the same run id) to continue. A failed or cancelled run, an
// invalid plan and a plan that differs from the one recorded under the run id
// are non-retryable application errors (types ErrTypeRunFailed,
// ErrTypeBadRequest) that carry the Result as details when there is one;
// other errors are retryable.
//
// # The limit: the ledger is local to a worker
//
// The ledger is a directory on the worker's disk, locked by one process.
// A retry that Temporal schedules on the same worker (or on a worker that
// mounts the same persistent volume after the first one died) resumes from
// the ledger as described. A retry on another worker, with another data
// directory, starts the run afresh there: keyed and lookup actions are still
// safe because the keys are derived from the run id and the action, not from
// the worker (the provider deduplicates the key, the lookup finds the
// object), idempotent and read_only actions repeat harmlessly, but an
// at_most_once action may happen twice. Until docket has a shared ledger,
// run plans with at_most_once actions on a sticky worker (a task queue
// served by one worker) or give the workers one persistent volume that only
// one of them mounts at a time.
//
// Imports: the standard library, docket's executor, ledger, plan and tools,
// and go.temporal.io/sdk.
package temporalstep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
)

// Application error types RunPlan returns (non-retryable).
const (
	ErrTypeRunFailed  = "DocketRunFailed"  // the run failed or was cancelled
	ErrTypeBadRequest = "DocketBadRequest" // invalid request or plan, plan mismatch, tools changed
)

// Config builds the Activities of one worker.
type Config struct {
	// DataDir is the worker's ledger directory (required; created if
	// missing). One process may hold it at a time.
	DataDir string
	// Tools is the registry the plans are checked against and run with
	// (required).
	Tools *tools.Registry
	// Logger receives the ledger's and executor's records. Default: discards.
	Logger *slog.Logger
	// Executor, when set, adjusts the executor's config before it is built
	// (retry policy, timeouts; tests set hooks).
	Executor func(*executor.Config)
}

// Activities runs docket plans for one worker. Build it with New and Close
// it when the worker stops.
type Activities struct {
	l   ledger.Store
	eng *executor.Engine
}

// New opens the data directory and builds the executor. It fails with
// ledger.ErrLocked when another process holds the directory.
func New(ctx context.Context, cfg Config) (*Activities, error) {
	if cfg.DataDir == "" || cfg.Tools == nil {
		return nil, errors.New("temporalstep: Config.DataDir and Config.Tools are required")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	l, err := badgerdb.Open(ctx, badgerdb.Config{Dir: cfg.DataDir, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("temporalstep: opening %s: %w", cfg.DataDir, err)
	}
	ecfg := executor.Config{Ledger: l, Tools: cfg.Tools, Logger: logger}
	if cfg.Executor != nil {
		cfg.Executor(&ecfg)
	}
	eng, err := executor.New(ecfg)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("temporalstep: %w", err)
	}
	return &Activities{l: l, eng: eng}, nil
}

// Approve approves the named actions of a run that waits for a person (by
// names the reviewer; an empty list is refused, never "all"), for workflows that collect approvals as signals; call RunPlan
// again afterwards to continue the run.
func (a *Activities) Approve(ctx context.Context, runID string, actionIDs []string, by string) error {
	if err := a.eng.Approve(ctx, runID, actionIDs, by); err != nil {
		if errors.Is(err, executor.ErrNotReviewable) || errors.Is(err, ledger.ErrNotFound) || errors.Is(err, executor.ErrNothingNamed) {
			return badRequest(fmt.Errorf("approving %v of run %s: %w", actionIDs, runID, err), nil)
		}
		return fmt.Errorf("approving %v of run %s: %w", actionIDs, runID, err)
	}
	return nil
}

// Close closes the ledger.
func (a *Activities) Close() error { return a.l.Close() }

// Request is RunPlan's input.
type Request struct {
	// RunID names the docket run. Default: "temporal/<workflow id>/<activity
	// id>", stable across retries of the activity.
	RunID string `json:"run_id,omitempty"`
	// Plan is the plan JSON ({"goal", "actions": [...]}). It may be omitted
	// to continue a run that exists.
	Plan json.RawMessage `json:"plan,omitempty"`
	// Approve is the policy stored when the run is created: "safe"
	// (default), "all" or "none".
	Approve string `json:"approve,omitempty"`
}

// Result is RunPlan's output.
type Result struct {
	RunID  string          `json:"run_id"`
	Status string          `json:"status"` // the run's status (DESIGN.md Run statuses)
	Run    json.RawMessage `json:"run"`    // the Run JSON
}

// Waiting reports whether the run waits for a person (paused or awaiting
// approval).
func (r Result) Waiting() bool {
	return r.Status == string(ledger.RunPaused) || r.Status == string(ledger.RunAwaitingApproval)
}

// RunID returns the run id RunPlan uses for req in the current activity.
func RunID(ctx context.Context, req Request) string {
	if req.RunID != "" {
		return req.RunID
	}
	info := activity.GetInfo(ctx)
	return "temporal/" + info.WorkflowExecution.ID + "/" + info.ActivityID
}

// RunPlan records req's plan (or checks that the recorded one is the same)
// and drives the run until it completes, fails or waits for a person.
func (a *Activities) RunPlan(ctx context.Context, req Request) (Result, error) {
	runID := RunID(ctx, req)
	policy := executor.Policy(req.Approve)
	if policy == "" {
		policy = executor.PolicySafe
	}
	switch policy {
	case executor.PolicySafe, executor.PolicyAll, executor.PolicyNone:
	default:
		return Result{}, badRequest(fmt.Errorf("approve must be all, safe or none, not %q", req.Approve), nil)
	}
	opts := &executor.RunOptions{Policy: policy}
	var doc ledger.RunDoc
	var err error
	if len(req.Plan) > 0 {
		p, perr := plan.Decode(req.Plan)
		if perr != nil {
			return Result{}, badRequest(fmt.Errorf("run %s: %w", runID, perr), nil)
		}
		doc, err = a.eng.Run(ctx, runID, p, opts)
	} else {
		doc, err = a.eng.Resume(ctx, runID, opts)
	}
	var res *Result
	if doc.Run.ID != "" {
		r, merr := result(doc)
		if merr != nil {
			return Result{}, merr
		}
		res = &r
	}
	switch {
	case errors.Is(err, executor.ErrPlanMismatch), errors.Is(err, executor.ErrInvalidPlan),
		errors.Is(err, executor.ErrToolsChanged), errors.Is(err, ledger.ErrNotFound), errors.Is(err, ledger.ErrInvalid):
		return Result{}, badRequest(fmt.Errorf("run %s: %w", runID, err), res)
	case err != nil:
		return Result{}, fmt.Errorf("run %s: %w", runID, err) // retryable: the retry resumes
	}
	switch doc.Run.Status {
	case ledger.RunFailed, ledger.RunCancelled:
		msg := fmt.Sprintf("run %s %s", runID, doc.Run.Status)
		if doc.Run.Error != "" {
			msg += ": " + doc.Run.Error
		}
		return Result{}, temporal.NewNonRetryableApplicationError(msg, ErrTypeRunFailed, nil, *res)
	}
	return *res, nil
}

func result(doc ledger.RunDoc) (Result, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return Result{}, fmt.Errorf("encoding run %s: %w", doc.Run.ID, err)
	}
	return Result{RunID: doc.Run.ID, Status: string(doc.Run.Status), Run: b}, nil
}

func badRequest(err error, res *Result) error {
	if res != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadRequest, err, *res)
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadRequest, err)
}
