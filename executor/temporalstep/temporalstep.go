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
// a person is a successful activity result, so the workflow can wait for a
// signal or an update and call RunPlan again with the same request (or the
// same run id) to continue. The Result says what the person is asked:
// WaitingForApproval (actions that wait for approval before their first
// attempt: the Approve activity) or NeedsReview (an action whose outcome is
// unknown, usually after a crash during an at_most_once call: the Resolve
// activity marks it done with its output, retries it or skips it); a run a
// person paused waits for its resume. A failed or cancelled run, an invalid
// plan and a plan that differs from the one recorded under the run id are
// non-retryable application errors (types ErrTypeRunFailed,
// ErrTypeBadRequest) that carry the Result as details when there is one;
// other errors are retryable.
//
// Workflow is a ready-made workflow over these activities: it runs the plan,
// and while the run waits it takes the "approve" and "resolve" updates
// (UpdateApprove, UpdateResolve), then continues.
//
// # Timeouts, heartbeats and history
//
// RunPlan drives the whole plan in one activity attempt, so set its
// StartToCloseTimeout to cover the longest plan (every action's calls and
// retries) and a HeartbeatTimeout to notice a dead worker sooner: RunPlan
// heartbeats every third of the HeartbeatTimeout (Config.HeartbeatEvery)
// for as long as it drives, including during a long tool call, with a
// Progress (actions done, in flight, waiting) as the heartbeat details. A
// live attempt therefore never times out on heartbeats, and Temporal starts
// the next attempt only when the previous one died or returned; if an
// attempt that is still calling does get replaced (a worker cut off from
// the server), the new attempt finds the call's claim in the ledger and
// waits for it (same process), or treats it by its effect class (another
// process), as after a crash. Workflow uses DefaultStartToClose and
// DefaultHeartbeat unless the request sets them.
//
// A Result carries a summary of each action (id, tool, class, status,
// attempts, a capped error, the output's size), never the outputs, so that
// large model inputs and outputs stay out of the workflow's history (which
// Temporal caps at 50 MB); set Request.IncludeRun to get the whole Run JSON
// as well.
//
// # The limit: the ledger is local to a worker
//
// With Config.DataDir the ledger is a directory on the worker's disk, locked
// by one process (Config.Ledger takes any ledger.Store instead, such as a
// shared one). While a worker holds the directory, `docket resolve --data`
// on it answers exit 4 (busy): resolve through the workflow (the "resolve"
// update runs the Resolve activity in the worker that holds the ledger).
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
// Imports: the standard library, docket's executor, ledger (and
// ledger/badgerdb for Config.DataDir), plan and tools, and go.temporal.io/sdk.
package temporalstep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
)

// Application error types the activities return (non-retryable).
const (
	ErrTypeRunFailed  = "DocketRunFailed"  // the run failed or was cancelled
	ErrTypeBadRequest = "DocketBadRequest" // invalid request or plan, plan mismatch, tools changed, an action not in the state the review needs
)

// Activity names Register uses (and Workflow calls).
const (
	ActivityRunPlan = "RunPlan"
	ActivityApprove = "Approve"
	ActivityResolve = "Resolve"
)

// Config builds the Activities of one worker.
type Config struct {
	// Ledger is the store the runs are recorded in; the caller opens and
	// closes it (Close leaves it open). Set Ledger or DataDir, not both.
	Ledger ledger.Store
	// DataDir is the worker's ledger directory (created if missing), opened
	// as a Badger ledger that Close closes. One process may hold it at a
	// time.
	DataDir string
	// Tools is the registry the plans are checked against and run with
	// (required).
	Tools *tools.Registry
	// Logger receives the ledger's and executor's records. Default: discards.
	Logger *slog.Logger
	// Executor, when set, adjusts the executor's config before it is built
	// (retry policy, timeouts; tests set hooks).
	Executor func(*executor.Config)
	// HeartbeatEvery is how often RunPlan heartbeats while it drives a run.
	// Default: a third of the activity's HeartbeatTimeout, or 10s when it
	// has none (the SDK throttles heartbeats anyway).
	HeartbeatEvery time.Duration
}

// Activities runs docket plans for one worker. Build it with New and Close
// it when the worker stops.
type Activities struct {
	l      ledger.Store
	owned  bool // opened from DataDir: Close closes it
	eng    *executor.Engine
	beatEv time.Duration
}

// New builds the executor over cfg.Ledger, or opens cfg.DataDir. It fails
// with ledger.ErrLocked when another process holds the directory.
func New(ctx context.Context, cfg Config) (*Activities, error) {
	if (cfg.DataDir == "") == (cfg.Ledger == nil) || cfg.Tools == nil {
		return nil, errors.New("temporalstep: Config.Tools and exactly one of Config.Ledger and Config.DataDir are required")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	l, owned := cfg.Ledger, false
	if l == nil {
		var err error
		if l, err = badgerdb.Open(ctx, badgerdb.Config{Dir: cfg.DataDir, Logger: logger}); err != nil {
			return nil, fmt.Errorf("temporalstep: opening %s: %w", cfg.DataDir, err)
		}
		owned = true
	}
	ecfg := executor.Config{Ledger: l, Tools: cfg.Tools, Logger: logger}
	if cfg.Executor != nil {
		cfg.Executor(&ecfg)
	}
	eng, err := executor.New(ecfg)
	if err != nil {
		if owned {
			l.Close()
		}
		return nil, fmt.Errorf("temporalstep: %w", err)
	}
	return &Activities{l: l, owned: owned, eng: eng, beatEv: cfg.HeartbeatEvery}, nil
}

// ActivityRegistry is where Register registers the activities: a
// worker.Worker, or a testsuite environment.
type ActivityRegistry interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Register registers RunPlan, Approve and Resolve under ActivityRunPlan,
// ActivityApprove and ActivityResolve.
func (a *Activities) Register(r ActivityRegistry) {
	r.RegisterActivityWithOptions(a.RunPlan, activity.RegisterOptions{Name: ActivityRunPlan})
	r.RegisterActivityWithOptions(a.Approve, activity.RegisterOptions{Name: ActivityApprove})
	r.RegisterActivityWithOptions(a.Resolve, activity.RegisterOptions{Name: ActivityResolve})
}

// Approve approves the named actions of a run that waits for a person (by
// names the reviewer; an empty list is refused, never "all"), for workflows
// that collect approvals as signals or updates; call RunPlan again
// afterwards to continue the run. Approving an action approved already is
// success, so a retried Approve is harmless.
func (a *Activities) Approve(ctx context.Context, runID string, actionIDs []string, by string) error {
	if err := a.eng.Approve(ctx, runID, actionIDs, by); err != nil {
		if errors.Is(err, executor.ErrNotReviewable) || errors.Is(err, ledger.ErrNotFound) || errors.Is(err, executor.ErrNothingNamed) {
			return badRequest(fmt.Errorf("approving %v of run %s: %w", actionIDs, runID, err), nil)
		}
		return fmt.Errorf("approving %v of run %s: %w", actionIDs, runID, err)
	}
	return nil
}

// Resolution is the Resolve activity's input: a person's decision on an
// action in needs_review. Exactly one of Done, Retry and Skip.
type Resolution struct {
	RunID    string `json:"run_id"`
	ActionID string `json:"action_id"`
	// Done marks the action succeeded with this output (what the person
	// found the effect produced), validated against the tool's output
	// schema if it declares one.
	Done json.RawMessage `json:"done,omitempty"`
	// Retry lets the action run once more (a new attempt of the same key).
	Retry bool `json:"retry,omitempty"`
	// Skip skips it; its dependents see no output.
	Skip bool `json:"skip,omitempty"`
	// By names the person (recorded with the decision; no secrets).
	By string `json:"by,omitempty"`
}

// Resolve applies a person's decision to an action in needs_review; call
// RunPlan again afterwards to continue the run. A decision that is recorded
// already (this activity retried after it committed) is success; an action
// that is not in needs_review, an unknown one and a decision that is not
// exactly one of done, retry and skip (or whose output does not match the
// tool's output schema) are non-retryable ErrTypeBadRequest errors.
func (a *Activities) Resolve(ctx context.Context, r Resolution) error {
	lr := ledger.Resolution{Done: r.Done, Retry: r.Retry, Skip: r.Skip, By: r.By}
	err := a.eng.Resolve(ctx, r.RunID, r.ActionID, lr)
	if errors.Is(err, executor.ErrNotReviewable) {
		// The ledger answers the same decision again with success when it
		// is the one recorded (a retry of this activity after its commit).
		res, aerr := a.l.Apply(ctx, ledger.Resolve(r.RunID, r.ActionID, lr))
		if aerr == nil && len(res) == 1 && res[0].Err == nil {
			return nil
		}
	}
	var ae *executor.ActionError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("resolving %s of run %s: %w", r.ActionID, r.RunID, err)
	case errors.As(err, &ae), errors.Is(err, ledger.ErrNotFound):
		return badRequest(fmt.Errorf("resolving %s of run %s: %w", r.ActionID, r.RunID, err), nil)
	default:
		return fmt.Errorf("resolving %s of run %s: %w", r.ActionID, r.RunID, err) // retryable
	}
}

// Close closes the ledger when New opened it (Config.DataDir).
func (a *Activities) Close() error {
	if !a.owned {
		return nil
	}
	return a.l.Close()
}

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
	// IncludeRun puts the whole Run JSON (every argument and output) in
	// Result.Run. Default: the summary only, to keep large outputs out of
	// the workflow's history.
	IncludeRun bool `json:"include_run,omitempty"`
}

// Result is RunPlan's output: the run's summary.
type Result struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"` // the run's status (ledger/README.md, Action state machine)
	// AwaitingApproval lists the actions that wait for a person's approval
	// before their first attempt (the Approve activity).
	AwaitingApproval []string `json:"awaiting_approval,omitempty"`
	// InReview lists the actions in needs_review: their outcome is unknown
	// and a person says what happened (the Resolve activity).
	InReview []string `json:"needs_review,omitempty"`
	// PausedBy names who paused the run, while a person's pause holds.
	PausedBy string `json:"paused_by,omitempty"`
	// Error is the run's error, when it failed.
	Error   string          `json:"error,omitempty"`
	Actions []ActionSummary `json:"actions"`
	// Run is the whole Run JSON, with Request.IncludeRun only.
	Run json.RawMessage `json:"run,omitempty"`
}

// ActionSummary is one action of a Result, without its arguments and output.
type ActionSummary struct {
	ID          string `json:"id"`
	Tool        string `json:"tool"`
	Class       string `json:"class"`
	Status      string `json:"status"`
	Attempts    int    `json:"attempts"`
	Error       string `json:"error,omitempty"` // at most maxError bytes
	OutputBytes int    `json:"output_bytes,omitempty"`
}

// maxError caps an action's error in a Result.
const maxError = 1024

// Waiting reports whether the run waits for a person (paused or awaiting
// approval), for any reason: WaitingForApproval and NeedsReview tell which.
func (r Result) Waiting() bool {
	return r.Status == string(ledger.RunPaused) || r.Status == string(ledger.RunAwaitingApproval)
}

// WaitingForApproval reports whether actions wait for a person's approval
// (AwaitingApproval): approve them (or reject them) to continue.
func (r Result) WaitingForApproval() bool { return r.Waiting() && len(r.AwaitingApproval) > 0 }

// NeedsReview reports whether actions are in needs_review (InReview): their
// outcome is unknown, and a person resolves each (done, retry or skip) to
// continue. Approving them is refused.
func (r Result) NeedsReview() bool { return r.Waiting() && len(r.InReview) > 0 }

// RunID returns the run id RunPlan uses for req in the current activity.
func RunID(ctx context.Context, req Request) string {
	if req.RunID != "" {
		return req.RunID
	}
	info := activity.GetInfo(ctx)
	return "temporal/" + info.WorkflowExecution.ID + "/" + info.ActivityID
}

// Progress is RunPlan's heartbeat details: where the run is.
type Progress struct {
	RunID    string   `json:"run_id"`
	Status   string   `json:"status"` // "" until the run is recorded
	Total    int      `json:"total"`
	Done     int      `json:"done"`                // succeeded, skipped or compensated
	InFlight []string `json:"in_flight,omitempty"` // claimed: a call may be under way
	Waiting  []string `json:"waiting,omitempty"`   // for approval or in needs_review
}

// RunPlan records req's plan (or checks that the recorded one is the same)
// and drives the run until it completes, fails or waits for a person,
// heartbeating with its Progress meanwhile.
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
	stop := a.heartbeat(ctx, runID)
	opts := &executor.RunOptions{Policy: policy}
	var doc ledger.RunDoc
	var err error
	if len(req.Plan) > 0 {
		p, perr := plan.Decode(req.Plan)
		if perr != nil {
			stop()
			return Result{}, badRequest(fmt.Errorf("run %s: %w", runID, perr), nil)
		}
		doc, err = a.eng.Run(ctx, runID, p, opts)
	} else {
		doc, err = a.eng.Resume(ctx, runID, opts)
	}
	stop()
	var res *Result
	if doc.Run.ID != "" {
		r, merr := result(doc, req.IncludeRun)
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

// heartbeat records a heartbeat with the run's Progress at once and then
// every HeartbeatEvery until stop is called (stop returns once the last one
// is sent, so none follows the activity's result).
func (a *Activities) heartbeat(ctx context.Context, runID string) (stop func()) {
	every := a.beatEv
	if every <= 0 {
		every = 10 * time.Second
		if hb := activity.GetInfo(ctx).HeartbeatTimeout; hb > 0 {
			every = hb / 3
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx, a.progress(ctx, runID))
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// progress reads where the run is from the ledger (a zero Progress but the
// run id when it is not recorded yet or cannot be read).
func (a *Activities) progress(ctx context.Context, runID string) Progress {
	p := Progress{RunID: runID}
	doc, err := a.l.Doc(ctx, runID)
	if err != nil {
		return p
	}
	p.Status, p.Total = string(doc.Run.Status), len(doc.Actions)
	for _, act := range doc.Actions {
		switch {
		case act.Status == ledger.StatusSucceeded, act.Status == ledger.StatusSkipped, act.Status == ledger.StatusCompensated:
			p.Done++
		case act.Status == ledger.StatusClaimed:
			p.InFlight = append(p.InFlight, act.ID)
		case waitsForPerson(doc.Run, act) != "":
			p.Waiting = append(p.Waiting, act.ID)
		}
	}
	return p
}

// waitsForPerson says what a person is asked about act: "review" (needs_review),
// "approval" (never attempted, not approved, in a run that waits), or "".
func waitsForPerson(run ledger.Run, act ledger.Action) string {
	switch {
	case act.Status == ledger.StatusNeedsReview:
		return "review"
	case act.Status == ledger.StatusPending && act.Attempts == 0 &&
		(run.Status == ledger.RunAwaitingApproval || run.Status == ledger.RunPaused):
		return "approval"
	}
	return ""
}

func result(doc ledger.RunDoc, includeRun bool) (Result, error) {
	r := Result{RunID: doc.Run.ID, Status: string(doc.Run.Status), PausedBy: doc.Run.PausedBy, Error: doc.Run.Error, Actions: []ActionSummary{}}
	for _, act := range doc.Actions {
		s := ActionSummary{ID: act.ID, Tool: act.Tool, Class: act.Class, Status: string(act.Status), Attempts: act.Attempts, Error: capped(act.Error)}
		if len(act.Output) > 0 && string(act.Output) != "null" {
			s.OutputBytes = len(act.Output)
		}
		r.Actions = append(r.Actions, s)
		switch waitsForPerson(doc.Run, act) {
		case "review":
			r.InReview = append(r.InReview, act.ID)
		case "approval":
			r.AwaitingApproval = append(r.AwaitingApproval, act.ID)
		}
	}
	if includeRun {
		b, err := json.Marshal(doc)
		if err != nil {
			return Result{}, fmt.Errorf("encoding run %s: %w", doc.Run.ID, err)
		}
		r.Run = b
	}
	return r, nil
}

// capped cuts s to maxError bytes (at a rune boundary), saying so.
func capped(s string) string {
	if len(s) <= maxError {
		return s
	}
	cut := maxError
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut] + "… (cut; the whole error is in the run)"
}

func badRequest(err error, res *Result) error {
	if res != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadRequest, err, *res)
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeBadRequest, err)
}
