package executor

// SCAFFOLD: the executor helper replaces this file with the real implementation.
// Exported names and signatures here are a contract with cmd/docket (keep them;
// adding more is fine). It exists so that other packages compile meanwhile.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
)

// Errors callers test with errors.Is.
var (
	ErrPlanMismatch  = ledger.ErrPlanMismatch                                                 // same run id, different plan
	ErrToolsChanged  = errors.New("executor: tool definitions changed since the run started") // resume needs AcceptToolsChange
	ErrInvalidPlan   = errors.New("executor: invalid plan")                                   // wraps plan.Errors / tools.ArgsError
	ErrNotReviewable = errors.New("executor: action is not in a state that allows this")      // approve after claim, etc.
)

// Policy is a run's approval policy (DESIGN.md): "safe" (default), "all", "none".
type Policy string

const (
	PolicySafe Policy = "safe"
	PolicyAll  Policy = "all"
	PolicyNone Policy = "none"
)

// RetryPolicy bounds automatic retries of retry-safe attempts.
type RetryPolicy struct {
	MaxAttempts int           // default 5
	Base        time.Duration // first backoff, default 200ms (full jitter)
	Max         time.Duration // cap per backoff, default 10s
	MaxElapsed  time.Duration // total time across attempts, default 2m
}

// Hooks are test-only fault-injection points, called with the action id.
// A nil hook does nothing.
type Hooks struct {
	BeforeClaim  func(actionID string) // before the claim is written
	AfterClaim   func(actionID string) // claim durable, tool not yet called
	AfterCall    func(actionID string) // tool returned (effect happened), outcome not yet recorded
	AfterOutcome func(actionID string) // outcome durable
}

// Config builds an Engine. Zero values take documented defaults.
type Config struct {
	Ledger      *ledger.Ledger  // required
	Tools       *tools.Registry // required
	Clock       ledger.Clock    // default real time
	Logger      *slog.Logger    // default slog.Default()
	Retry       RetryPolicy
	Parallelism int           // independent actions in flight per run, default 8
	CallTimeout time.Duration // default per-call timeout when the tool has none, default 30s
	SkewMargin  time.Duration // clock-skew margin for lookup "not found", default 2s
	Hooks       Hooks
}

// Engine runs recorded plans. Safe for concurrent use; several engines (or
// goroutines) may drive the same run: each key still takes effect once.
type Engine struct{}

// New validates cfg and returns an Engine.
func New(cfg Config) (*Engine, error) { panic("scaffold") }

// RunOptions are per-run settings used when the run is created.
type RunOptions struct {
	Policy            Policy // stored with the run at creation; default safe
	AcceptToolsChange bool   // resume even if the tools changed since the run started
}

// Run records p as run runID (or checks that the recorded plan is the same:
// ErrPlanMismatch otherwise) and executes it until the run is completed, failed,
// cancelled, paused (needs a person) or awaiting approval. It returns the Run
// JSON document in every case; err is non-nil only when the run could not be
// driven (bad plan, ledger error, context ended).
func (e *Engine) Run(ctx context.Context, runID string, p *plan.Plan, o *RunOptions) (ledger.RunDoc, error) {
	panic("scaffold")
}

// Resume drives an existing run (after approvals, resolutions, a restart).
func (e *Engine) Resume(ctx context.Context, runID string, o *RunOptions) (ledger.RunDoc, error) {
	panic("scaffold")
}

// Approve approves the given actions (all not-yet-claimed ones if none given),
// as the reviewer saw them. It does not drive the run; call Resume.
func (e *Engine) Approve(ctx context.Context, runID string, actionIDs []string, by string) error {
	panic("scaffold")
}

// Reject rejects one action; the run fails cleanly when it gets there.
func (e *Engine) Reject(ctx context.Context, runID, actionID, reason, by string) error {
	panic("scaffold")
}

// Edit changes a not-yet-claimed action's arguments (validated against the
// tool's schema); its key changes accordingly.
func (e *Engine) Edit(ctx context.Context, runID, actionID string, args json.RawMessage, by string) error {
	panic("scaffold")
}

// Resolve applies a person's decision to an action in needs_review. A Done
// output is validated against the tool's output schema if it has one.
func (e *Engine) Resolve(ctx context.Context, runID, actionID string, r ledger.Resolution) error {
	panic("scaffold")
}

// Pause, Cancel: a paused or cancelled run starts no new actions; in-flight ones
// finish and are recorded. Resume continues a paused run.
func (e *Engine) Pause(ctx context.Context, runID, by string) error  { panic("scaffold") }
func (e *Engine) Cancel(ctx context.Context, runID, by string) error { panic("scaffold") }

// Replay records p as a new revision of runID (replay with edits) and drives it:
// unchanged actions keep their keys and outputs; changed ones run.
func (e *Engine) Replay(ctx context.Context, runID string, p *plan.Plan) (ledger.RunDoc, error) {
	panic("scaffold")
}

// Fork starts newRunID with the current plan of runID: everything runs again.
func (e *Engine) Fork(ctx context.Context, runID, newRunID string, o *RunOptions) (ledger.RunDoc, error) {
	panic("scaffold")
}

// UUID and Now are recorded helpers: derived once per (run, name), stored in
// the ledger, returned unchanged on resume and replay.
func (e *Engine) UUID(ctx context.Context, runID, name string) (string, error) { panic("scaffold") }
func (e *Engine) Now(ctx context.Context, runID, name string) (time.Time, error) {
	panic("scaffold")
}

// DeriveRunID derives a run id from a plan when the caller gives none, so an
// identical rerun resumes: "run_" + first 16 hex of the plan hash.
func DeriveRunID(p *plan.Plan) (string, error) { panic("scaffold") }
