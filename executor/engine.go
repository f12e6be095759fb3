package executor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

// Errors callers test with errors.Is.
var (
	ErrPlanMismatch  = ledger.ErrPlanMismatch                                                 // same run id, different plan
	ErrToolsChanged  = errors.New("executor: tool definitions changed since the run started") // resume needs AcceptToolsChange
	ErrInvalidPlan   = errors.New("executor: invalid plan")                                   // wraps plan.Errors / tools.ArgsError
	ErrNotReviewable = errors.New("executor: action is not in a state that allows this")      // approve after claim, etc.
	// ErrBusy: the change would be lost or would abandon work: a drive of
	// this process is driving the run (edit, reject, replay), or an action
	// has no settled outcome yet (replay over needs_review or claimed).
	ErrBusy = errors.New("executor: the run has work in progress")
	// ErrDraining: the engine was told to stop starting work (Drain); the
	// drive ended before the run did. The next start goes on from the
	// ledger.
	ErrDraining = errors.New("executor: the engine is shutting down: no new attempt starts")
)

// invalidPlan wraps the problems a plan's validation found so that
// errors.Is(err, ErrInvalidPlan) holds without saying "invalid plan" twice:
// plan.Errors already reads "invalid plan: ...".
func invalidPlan(err error) error { return invalidPlanError{err} }

type invalidPlanError struct{ err error }

func (e invalidPlanError) Error() string {
	var pe plan.Errors
	if errors.As(e.err, &pe) {
		return e.err.Error()
	}
	return "invalid plan: " + e.err.Error()
}

func (e invalidPlanError) Unwrap() []error { return []error{ErrInvalidPlan, e.err} }

// ActionError says which run, action and key an error is about. It wraps the
// cause; errors.Is(err, ErrNotReviewable) and ledger sentinels work through it.
type ActionError struct {
	RunID    string
	ActionID string
	Key      string // "" when the action has no key yet
	Op       string // what was being done: "approve", "claim", "record outcome", ...
	Err      error
}

func (e *ActionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "executor: %s: run %s action %s", e.Op, e.RunID, e.ActionID)
	if e.Key != "" {
		fmt.Fprintf(&b, " key %s", e.Key)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *ActionError) Unwrap() error { return e.Err }

// Policy is a run's approval policy (executor/README.md, Approvals): "safe" (default), "all", "none".
type Policy string

const (
	PolicySafe Policy = "safe"
	PolicyAll  Policy = "all"
	PolicyNone Policy = "none"
)

func (p Policy) valid() bool { return p == PolicySafe || p == PolicyAll || p == PolicyNone }

// RetryPolicy bounds automatic retries of the attempts that may be retried
// (which ones may is the effect class's rule; see DESIGN.md). The wait
// before retry k is drawn between half and all of min(Max, Base·2^(k-1)),
// and at least a server's Retry-After; no retry starts later than
// MaxElapsed after the drive's first attempt. The defaults ride out an
// outage of about a minute: against an API that refuses every connection,
// an action gives up one minute after its first attempt, after 12 to 18
// attempts. A tool's own tools.Spec.Retry (the tools file's "retry")
// overrides MaxAttempts, Max and MaxElapsed for that tool.
type RetryPolicy struct {
	MaxAttempts int           // attempts per action within one drive, the first included, default 20
	Base        time.Duration // first backoff, default 200ms
	Max         time.Duration // cap per backoff, default 10s
	MaxElapsed  time.Duration // how long after the first attempt a retry may start, default 1m
}

// The RetryPolicy defaults.
const (
	DefaultRetryAttempts   = 20
	DefaultRetryBase       = 200 * time.Millisecond
	DefaultRetryMax        = 10 * time.Second
	DefaultRetryMaxElapsed = time.Minute
)

// WithDefaults fills zero fields with their defaults.
func (r RetryPolicy) WithDefaults() RetryPolicy {
	r.MaxAttempts = cmp.Or(r.MaxAttempts, DefaultRetryAttempts)
	r.Base = cmp.Or(r.Base, DefaultRetryBase)
	r.Max = cmp.Or(r.Max, DefaultRetryMax)
	r.MaxElapsed = cmp.Or(r.MaxElapsed, DefaultRetryMaxElapsed)
	return r
}

// forTool is r with a tool's own settings (tools.Spec.Retry) in place of
// its own; the first backoff is never longer than the tool's cap.
func (r RetryPolicy) forTool(t tools.Retry) RetryPolicy {
	r.MaxAttempts = cmp.Or(t.Attempts, r.MaxAttempts)
	r.Max = cmp.Or(t.MaxBackoff, r.Max)
	r.MaxElapsed = cmp.Or(t.Budget, r.MaxElapsed)
	r.Base = min(r.Base, r.Max)
	return r
}

// backoffRange is the range the wait before retry k (1-based) is drawn
// from: half to all of min(Max, Base·2^(k-1)).
func (r RetryPolicy) backoffRange(k int) (lo, hi time.Duration) {
	hi = r.Base
	for i := 1; i < k && hi < r.Max; i++ {
		hi *= 2
	}
	hi = min(hi, r.Max)
	return hi / 2, hi
}

// Hooks are fault-injection points for tests and the crash harness (docket
// chaos), called with the action id; a nil hook does nothing. They are not
// an API: production code never sets them (what other parts must know
// about the engine's work, they learn from Config.Observer), and when they
// run, what they see and what they may do can change with any release.
type Hooks struct {
	BeforeClaim  func(actionID string) // before the claim is written
	AfterClaim   func(actionID string) // claim durable, tool not yet called
	AfterCall    func(actionID string) // tool returned (effect happened), outcome not yet recorded
	AfterOutcome func(actionID string) // outcome durable
}

// DefaultParallelism is Config.Parallelism when unset: how many independent
// actions of one run are in flight at once (calls to tools, each with its
// claim recorded). Ready actions are claimed together in one commit and
// outcomes that arrive together share one, so the more that are in flight,
// the fewer syncs per action: 200 independent actions through `docket run`
// against a loopback API took 220 msyncs at 8, 68 at 32 and 46 at 64 (README,
// Performance). 32 stays below the HTTP tools' idle connections per host
// (100) and bounds what one run asks of one API at once; set it lower for
// APIs with tight rate limits.
const DefaultParallelism = 32

// Config builds an Engine. Zero values take documented defaults.
type Config struct {
	Ledger      ledger.Store    // required
	Tools       *tools.Registry // required
	Clock       ledger.Clock    // default real time
	Logger      *slog.Logger    // default slog.Default(); component=executor is added
	Retry       RetryPolicy     // see RetryPolicy for defaults
	Parallelism int             // independent actions in flight per run, default DefaultParallelism
	CallTimeout time.Duration   // per-call timeout when the tool has none, default 30s
	SkewMargin  time.Duration   // clock-skew margin for lookup "not found", default 2s
	// BusyWait is how long an edit, a rejection or a replay waits for a
	// drive of the run (in this process) to stop before it is refused with
	// ErrBusy, default 2s. A drive keeps the rows it loaded, so such a change
	// is never made under it.
	BusyWait time.Duration
	// Observer is told what the engine does (metrics, traces, live views);
	// default: NopObserver.
	Observer Observer
	// Tracer wraps runs, actions, attempts and lookups in spans and gives
	// tool calls their attempt's context (executor/oteltrace). Default: none.
	Tracer Tracer
	Hooks  Hooks
	// Policy holds the global policy rules (the tools file's top-level
	// "policy", then a --policy file's), compiled with policy.Compile; each
	// tool's own rules come first (tools.Spec.Policy). Default: none.
	Policy []policy.Rule

	// Sleep waits d or until ctx ends (returning ctx.Err()). Backoffs and
	// lookup visibility waits go through it so tests can advance a fake clock.
	// Default: a real timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand draws backoff jitter. Default: a randomly seeded source. It is used
	// under the engine's lock.
	Rand *mrand.Rand
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func realSleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WithDefaults returns cfg with every zero field set to its default.
func (cfg Config) WithDefaults() Config {
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Retry = cfg.Retry.WithDefaults()
	cfg.Parallelism = cmp.Or(cfg.Parallelism, DefaultParallelism)
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, 30*time.Second)
	cfg.SkewMargin = cmp.Or(cfg.SkewMargin, 2*time.Second)
	cfg.BusyWait = cmp.Or(cfg.BusyWait, 2*time.Second)
	if cfg.Sleep == nil {
		cfg.Sleep = realSleep
	}
	if cfg.Rand == nil {
		cfg.Rand = mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64()))
	}
	return cfg
}

func (cfg Config) validate() error {
	var errs []error
	if cfg.Ledger == nil {
		errs = append(errs, errors.New("the Ledger field is required"))
	}
	if cfg.Tools == nil {
		errs = append(errs, errors.New("the Tools field is required"))
	}
	if cfg.Parallelism < 1 {
		errs = append(errs, fmt.Errorf("the Parallelism field is %d: it must be at least 1", cfg.Parallelism))
	}
	if cfg.Retry.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("the Retry.MaxAttempts field is %d: it must be at least 1", cfg.Retry.MaxAttempts))
	}
	if cfg.Retry.Base < 0 || cfg.Retry.Max < cfg.Retry.Base || cfg.Retry.MaxElapsed < 0 {
		errs = append(errs, fmt.Errorf("the Retry field needs 0 <= Base <= Max and MaxElapsed >= 0 (got %v, %v, %v)",
			cfg.Retry.Base, cfg.Retry.Max, cfg.Retry.MaxElapsed))
	}
	if cfg.CallTimeout < 0 || cfg.SkewMargin < 0 || cfg.BusyWait < 0 {
		errs = append(errs, errors.New("CallTimeout, SkewMargin and BusyWait must not be negative"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("executor: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// Engine runs recorded plans. Safe for concurrent use; several engines (or
// goroutines) may drive the same run: each key still takes effect once.
type Engine struct {
	cfg    Config
	led    ledger.Store
	reg    *tools.Registry
	clock  ledger.Clock
	log    *slog.Logger
	obs    Observer
	tracer Tracer
	randMu sync.Mutex
	// scanVisits counts the nodes that drives looked at for ready actions
	// (tests check that it grows with the actions, not with actions × plan).
	scanVisits atomic.Uint64

	// drained ends when Drain is called (drain cancels it).
	drained context.Context
	drain   context.CancelFunc
}

// New validates cfg and returns an Engine.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	drained, drain := context.WithCancel(context.Background())
	return &Engine{
		cfg:     cfg,
		led:     cfg.Ledger,
		reg:     cfg.Tools,
		clock:   cfg.Clock,
		log:     cfg.Logger.With("component", "executor"),
		obs:     cmp.Or[Observer](cfg.Observer, NopObserver{}),
		tracer:  cmp.Or[Tracer](cfg.Tracer, nopTracer{}),
		drained: drained,
		drain:   drain,
	}, nil
}

// Drain stops the engine from starting work, for a graceful shutdown: once
// it returns, no drive claims an action or starts an attempt (a first one, a
// retry or a takeover), and backoff and lookup waits end at once. Calls in
// flight go on until they return or their drive's context ends, and their
// outcomes are recorded as usual: a call cut off by the context has an
// unknown outcome, which the next start decides by the tool's class (call
// again with the key, look up first, or ask a person). A claim written
// together with others but not yet called goes back to pending, marked not
// sent. Drives end once nothing of theirs is in flight, with ErrDraining
// when their run is not finished. Drain cannot be undone; it may be called
// more than once.
func (e *Engine) Drain() { e.drain() }

// draining reports whether Drain was called.
func (e *Engine) draining() bool { return e.drained.Err() != nil }

// sleep is Config.Sleep, cut short by Drain (then it returns ErrDraining).
func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(e.drained, func() { cancel(ErrDraining) })
	defer stop()
	if err := e.cfg.Sleep(sctx, d); err != nil {
		if c := context.Cause(sctx); errors.Is(c, ErrDraining) {
			return c
		}
		return err
	}
	return nil
}

// RunOptions are per-run settings used when the run is created.
type RunOptions struct {
	Policy            Policy // stored with the run at creation; default safe
	AcceptToolsChange bool   // resume even if the tools changed since the run started
	// Creator is who creates the run ("token:NAME", "cli:USER"), stored with
	// it at creation (ledger.Run.CreatedBy): policy rules see it as
	// run.creator and may exclude it from approving. Default "".
	Creator string
	// Retention is how long the ledger keeps the run after it ended,
	// stored with it at creation (ledger.Run.Retention; a global retention
	// that is longer wins). Default 0: as the collector is told.
	Retention time.Duration
}

func (o *RunOptions) orDefault() RunOptions {
	if o == nil {
		return RunOptions{Policy: PolicySafe}
	}
	r := *o
	r.Policy = cmp.Or(r.Policy, PolicySafe)
	return r
}

// Run records p as run runID (or checks that the recorded plan is the same:
// ErrPlanMismatch otherwise) and executes it until the run is completed, failed,
// cancelled, paused (needs a person) or awaiting approval. It returns the Run
// JSON document in every case; err is non-nil only when the run could not be
// driven (bad plan, ledger error, context ended).
//
// A new run is recorded in the commit that claims its first actions,
// decided from the rows being recorded (ledger.Op.InNewRun): one commit
// and no read before the first call.
func (e *Engine) Run(ctx context.Context, runID string, p *plan.Plan, o *RunOptions) (ledger.RunDoc, error) {
	nr, err := e.newRun(runID, p, o)
	if err != nil {
		return ledger.RunDoc{}, err
	}
	if nr.op, err = ledger.NewRun(nr.run, nr.plan, nr.rows); err != nil {
		return ledger.RunDoc{}, fmt.Errorf("executor: run %s: record run: %w", runID, err)
	}
	g := acquireDrive(e.led, runID)
	defer releaseDrive(e.led, runID, g)
	return e.drive(ctx, runID, nr)
}

// Record records p as run runID without driving it, or checks that the
// recorded plan is the same (ErrPlanMismatch otherwise) and that the tools
// did not change (ErrToolsChanged unless accepted). created says whether this
// call made the run; Resume drives it.
func (e *Engine) Record(ctx context.Context, runID string, p *plan.Plan, o *RunOptions) (run ledger.Run, created bool, err error) {
	nr, err := e.newRun(runID, p, o)
	if err != nil {
		return ledger.Run{}, false, err
	}
	stored, created, err := e.led.CreateRun(ctx, nr.run, nr.plan, nr.rows)
	doc, created, err := e.recorded(ctx, nr, stored, created, err)
	return doc.Run, created, err
}

// newRun is a run about to be recorded: the run, its plan and the rows it
// records, which its first drive decides from, the options it was given,
// and (Run) the op that records it (ledger.NewRun).
type newRun struct {
	op   ledger.Op
	run  ledger.Run
	plan *plan.Plan
	rows []ledger.Action
	opts RunOptions
}

// newRun checks p and builds the record of run runID.
func (e *Engine) newRun(runID string, p *plan.Plan, o *RunOptions) (*newRun, error) {
	opts := o.orDefault()
	if runID == "" {
		return nil, errors.New("executor: run: empty run id")
	}
	if !opts.Policy.valid() {
		return nil, fmt.Errorf("executor: run %s: unknown approval policy %q (want all, safe or none)", runID, opts.Policy)
	}
	if opts.Retention < 0 {
		return nil, fmt.Errorf("executor: run %s: negative retention %v", runID, opts.Retention)
	}
	if p == nil {
		return nil, fmt.Errorf("%w: run %s: no plan", ErrInvalidPlan, runID)
	}
	if err := p.Validate(e.reg); err != nil {
		return nil, fmt.Errorf("executor: run %s: %w", runID, invalidPlan(err))
	}
	pc := *p
	pc.RunID = runID
	rows, err := e.initialRows(&pc, opts.Policy, opts.Creator, 1)
	if err != nil {
		return nil, err
	}
	now := e.clock.Now().UTC()
	run := ledger.Run{
		ID:        runID,
		Status:    ledger.RunRunning,
		Revision:  1,
		Goal:      pc.Goal,
		Policy:    string(opts.Policy), // PlanHash: the ledger computes it
		ToolsHash: e.reg.Hash(),
		CreatedBy: opts.Creator,
		Retention: ledger.Duration(opts.Retention),
		CreatedAt: now,
		UpdatedAt: now,
	}
	return &newRun{run: run, plan: &pc, rows: rows, opts: opts}, nil
}

// recorded takes in what recording nr answered: a created run is logged;
// a run recorded before must have the same plan (ErrPlanMismatch) and
// tools (ErrToolsChanged unless accepted); a refusal comes with the run's
// document.
func (e *Engine) recorded(ctx context.Context, nr *newRun, stored ledger.Run, created bool, err error) (ledger.RunDoc, bool, error) {
	runID := nr.run.ID
	switch {
	case errors.Is(err, ledger.ErrPlanMismatch):
		doc, _ := e.led.Doc(ctx, runID)
		return doc, false, fmt.Errorf("executor: run %s: recorded plan differs from the given one (use replay to change it, or another run id): %w", runID, err)
	case err != nil:
		return ledger.RunDoc{}, false, fmt.Errorf("executor: run %s: record run: %w", runID, err)
	case !created:
		if err := e.checkTools(ctx, stored, nr.opts); err != nil {
			doc, _ := e.led.Doc(ctx, runID)
			return doc, false, err
		}
		return ledger.RunDoc{Run: stored}, false, nil
	}
	e.created(nr, stored)
	return ledger.RunDoc{Run: stored}, true, nil
}

// created logs run nr, which was just recorded as stored, and tells the
// Observer.
func (e *Engine) created(nr *newRun, stored ledger.Run) {
	e.log.Info("run created", "run_id", stored.ID, "actions", len(nr.rows), "policy", string(nr.opts.Policy))
	e.obs.PlanRecorded(stored.ID, stored.Revision, len(nr.rows))
}

// driveCounted drives the run, counted as a drive of this process (see
// gate.driving) from before it reads anything.
func (e *Engine) driveCounted(ctx context.Context, runID string) (ledger.RunDoc, error) {
	g := acquireDrive(e.led, runID)
	defer releaseDrive(e.led, runID, g)
	return e.drive(ctx, runID, nil)
}

// Resume drives an existing run (after approvals, resolutions, a restart).
// A run a person paused (Pause) stays paused: Resume concludes what is in
// flight, starts nothing new and returns the run with status paused; only
// Unpause lifts a person's pause.
func (e *Engine) Resume(ctx context.Context, runID string, o *RunOptions) (ledger.RunDoc, error) {
	opts := o.orDefault()
	run, err := e.led.GetRun(ctx, runID)
	if err != nil {
		return ledger.RunDoc{}, fmt.Errorf("executor: resume run %s: %w", runID, err)
	}
	if err := e.checkTools(ctx, run, opts); err != nil {
		doc, _ := e.led.Doc(ctx, runID)
		return doc, err
	}
	return e.driveCounted(ctx, runID)
}

// checkTools refuses to go on with a run whose tool definitions changed since
// it started (ErrToolsChanged) unless opts accepts the change; an accepted
// change is recorded on the run (ledger.SetToolsHash, event
// run.tools_changed) before anything runs, so that later resumes with the
// same tools go on without accepting it again.
func (e *Engine) checkTools(ctx context.Context, run ledger.Run, opts RunOptions) error {
	cur := e.reg.Hash()
	if run.ToolsHash == cur {
		return nil
	}
	if !opts.AcceptToolsChange {
		var legacy string
		if run.ToolsHash == e.reg.LegacyHash() {
			legacy = " (the run was recorded by an earlier docket, whose tools hash left out requests, key headers and lookups: accept once if those did not change)"
		}
		return fmt.Errorf("%w: run %s was started with tools %s, now %s%s: pass AcceptToolsChange (--accept-tools-change) to resume anyway",
			ErrToolsChanged, run.ID, run.ToolsHash, cur, legacy)
	}
	if _, err := apply(ctx, e.led, ledger.SetToolsHash(run.ID, cur)); err != nil {
		return fmt.Errorf("executor: run %s: recording the accepted tools change: %w", run.ID, err)
	}
	e.log.Info("tools change accepted", "run_id", run.ID, "from", run.ToolsHash, "to", cur)
	return nil
}

// initialRows builds the ledger rows of a plan: class from the registry, status
// approved when the policy and the tools file let the planned args through.
func (e *Engine) initialRows(p *plan.Plan, pol Policy, creator string, rev int) ([]ledger.Action, error) {
	rows := make([]ledger.Action, 0, len(p.Actions))
	for _, a := range p.Actions {
		t, ok := e.reg.Get(a.Tool)
		if !ok {
			return nil, fmt.Errorf("%w: action %s: %w: %q", ErrInvalidPlan, a.ID, tools.ErrUnknownTool, a.Tool)
		}
		spec := t.Spec()
		row := ledger.Action{
			RunID:     p.RunID,
			ID:        a.ID,
			Tool:      a.Tool,
			Class:     string(spec.Class),
			Status:    ledger.StatusPending,
			Args:      a.Args,
			DependsOn: a.DependsOn,
			Timer:     ledger.TimerOf(a),
		}
		g := e.gateFor(pol, spec, policy.Input{ActionID: a.ID, Args: a.Args,
			Run: policy.Run{ID: p.RunID, Goal: p.Goal, Creator: creator, Revision: rev}}, true)
		if g.Rule != "" {
			row.Gate = &g // a rule decided: recorded (the run's policy is the default without one)
		}
		if g.Need == 0 && g.Outcome != string(policy.Deny) {
			row.Status = ledger.StatusApproved
			row.ApprovedArgs = a.Args
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// Replay records p as a new revision of runID (replay with edits) and drives it:
// unchanged actions keep their keys and outputs; changed ones run.
//
// It refuses (ErrBusy) to replay over work that is not settled: while a drive
// of this process drives the run (it waits up to Config.BusyWait for it to
// stop), or while an action of the current revision has no settled outcome
// (claimed, waiting for a retry after an attempt, or needs_review: a person
// resolves it first). Like Resume, it refuses a run whose tools changed
// (ErrToolsChanged) unless o accepts the change. A run a person paused stays
// paused with the new revision recorded (Unpause, then Resume, runs it).
// o's Policy is not used: the run keeps the policy it was created with.
func (e *Engine) Replay(ctx context.Context, runID string, p *plan.Plan, o *RunOptions) (ledger.RunDoc, error) {
	if _, recording, err := e.recordReplay(ctx, runID, p, o); err != nil {
		if !recording {
			return ledger.RunDoc{}, err
		}
		doc, _ := e.led.Doc(ctx, runID)
		return doc, err
	}
	return e.driveCounted(ctx, runID)
}

// RecordReplay records p as the next revision of run runID without driving
// it (Resume drives it; Replay is RecordReplay, then Resume). It returns the
// revision recorded. It waits up to Config.BusyWait for a drive of the run
// in this process to stop, else it records nothing and returns ErrBusy.
func (e *Engine) RecordReplay(ctx context.Context, runID string, p *plan.Plan, o *RunOptions) (int, error) {
	rev, _, err := e.recordReplay(ctx, runID, p, o)
	return rev, err
}

// recordReplay is RecordReplay; recording says whether an error came from
// recording the revision (the run exists and is shown with the error).
func (e *Engine) recordReplay(ctx context.Context, runID string, p *plan.Plan, o *RunOptions) (rev int, recording bool, err error) {
	opts := o.orDefault()
	if p == nil {
		return 0, false, fmt.Errorf("%w: replay run %s: no plan", ErrInvalidPlan, runID)
	}
	if err := p.Validate(e.reg); err != nil {
		return 0, false, fmt.Errorf("executor: replay run %s: %w", runID, invalidPlan(err))
	}
	run, err := e.led.GetRun(ctx, runID)
	if err != nil {
		return 0, false, fmt.Errorf("executor: replay run %s: %w", runID, err)
	}
	pc := *p
	pc.RunID = runID
	if err := e.refuseUndoneReplay(ctx, run, &pc); err != nil {
		return 0, false, err
	}
	rows, err := e.initialRows(&pc, Policy(cmp.Or(run.Policy, string(PolicySafe))), run.CreatedBy, run.Revision+1)
	if err != nil {
		return 0, false, err
	}
	g, unlock, err := e.lockUndriven(ctx, runID, "replay", "record a new revision")
	if err != nil {
		return 0, false, err
	}
	rev, err = e.recordRevision(ctx, g, runID, &pc, rows, opts)
	unlock()
	if err != nil {
		return 0, true, err
	}
	e.log.Info("run replayed", "run_id", runID, "revision", rev)
	return rev, false, nil
}

// recordRevision checks that runID may take a new revision and records it,
// with the run moved back to running (unless a person paused it). Call with
// g.claimMu held for writing and no drive of the run in this process.
func (e *Engine) recordRevision(ctx context.Context, g *gate, runID string, p *plan.Plan, rows []ledger.Action, opts RunOptions) (int, error) {
	run, err := e.led.GetRun(ctx, runID)
	if err != nil {
		return 0, fmt.Errorf("executor: replay run %s: %w", runID, err)
	}
	if err := e.checkTools(ctx, run, opts); err != nil {
		return 0, err
	}
	cur, err := e.led.Actions(ctx, runID)
	if err != nil {
		return 0, fmt.Errorf("executor: replay run %s: %w", runID, err)
	}
	if err := unsettled(runID, cur); err != nil {
		return 0, err
	}
	rev, err := e.led.AddRevision(ctx, runID, p, rows)
	if err != nil {
		return 0, fmt.Errorf("executor: replay run %s: record revision: %w", runID, err)
	}
	// The new revision runs whatever the old one ended as (run.replayed says
	// so), except that a person's pause holds.
	if run.Status == ledger.RunPaused && run.PausedBy != "" {
		g.status, g.pausedByPerson = ledger.RunPaused, true
		e.obs.PlanRecorded(runID, rev, len(rows))
		return rev, nil
	}
	if _, err := apply(ctx, e.led, ledger.SetRunStatus(runID, ledger.RunRunning, "", "", nil)); err != nil {
		return 0, fmt.Errorf("executor: replay run %s: %w", runID, err)
	}
	g.status, g.pausedByPerson = ledger.RunRunning, false
	e.obs.PlanRecorded(runID, rev, len(rows))
	if run.Status != ledger.RunRunning {
		e.obs.RunStatus(runID, ledger.RunRunning)
	}
	return rev, nil
}

// unsettled refuses (ErrBusy) a new revision over cur, the rows of the
// current one, while one of them has no settled outcome: it needs review,
// is claimed, or waits for another attempt.
func unsettled(runID string, cur []ledger.Action) error {
	for _, r := range cur {
		switch {
		case r.Status == ledger.StatusNeedsReview:
			return &ActionError{RunID: runID, ActionID: r.ID, Key: r.Key, Op: "replay", Err: fmt.Errorf(
				"%w: action %s needs review (its outcome is unknown): check the external system and settle it first with "+
					"docket resolve %s %s (--done OUTPUT_JSON | --retry | --skip), or POST /v1/runs/%s/actions/%s/resolve; then replay",
				ErrBusy, r.ID, runID, r.ID, runID, r.ID)}
		case r.Status == ledger.StatusClaimed || sentBefore(r):
			return &ActionError{RunID: runID, ActionID: r.ID, Key: r.Key, Op: "replay", Err: fmt.Errorf(
				"%w: action %s was started and has no recorded outcome yet: continue the run (the same docket command, "+
					"or docket approve/resolve) so that it is concluded, then replay", ErrBusy, r.ID)}
		}
	}
	return nil
}

// Fork starts newRunID with the current revision's recorded plan of runID:
// everything runs again. Changes a reviewer made to actions through Edit are
// not part of any plan revision and are not carried over (a replay records
// them as a revision).
func (e *Engine) Fork(ctx context.Context, runID, newRunID string, o *RunOptions) (ledger.RunDoc, error) {
	if newRunID == runID {
		return ledger.RunDoc{}, fmt.Errorf("executor: fork run %s: the new run id must differ", runID)
	}
	p, err := e.led.Plan(ctx, runID, 0)
	if err != nil {
		return ledger.RunDoc{}, fmt.Errorf("executor: fork run %s: %w", runID, err)
	}
	if o == nil {
		run, err := e.led.GetRun(ctx, runID)
		if err != nil {
			return ledger.RunDoc{}, fmt.Errorf("executor: fork run %s: %w", runID, err)
		}
		o = &RunOptions{Policy: Policy(run.Policy)}
	}
	pc := *p
	pc.RunID = newRunID
	return e.Run(ctx, newRunID, &pc, o)
}

// UUID and Now are recorded helpers: derived once per (run, name), stored in
// the ledger, returned unchanged on resume and replay.
func (e *Engine) UUID(ctx context.Context, runID, name string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("executor: uuid %q for run %s: %w", name, runID, err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	id := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
	v, _ := json.Marshal(id)
	stored, err := e.led.Memo(ctx, runID, "uuid:"+name, v)
	if err != nil {
		return "", fmt.Errorf("executor: uuid %q for run %s: %w", name, runID, err)
	}
	var out string
	if err := json.Unmarshal(stored, &out); err != nil {
		return "", fmt.Errorf("executor: uuid %q for run %s: stored value: %w", name, runID, err)
	}
	return out, nil
}

// Now returns the time recorded for (run, name), recording the current time
// the first time.
func (e *Engine) Now(ctx context.Context, runID, name string) (time.Time, error) {
	v, _ := json.Marshal(e.clock.Now().UTC().Format(time.RFC3339Nano))
	stored, err := e.led.Memo(ctx, runID, "now:"+name, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("executor: now %q for run %s: %w", name, runID, err)
	}
	var s string
	if err := json.Unmarshal(stored, &s); err != nil {
		return time.Time{}, fmt.Errorf("executor: now %q for run %s: stored value: %w", name, runID, err)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("executor: now %q for run %s: stored value: %w", name, runID, err)
	}
	return t.UTC(), nil
}

// DeriveRunID derives a run id from a plan when the caller gives none, so an
// identical rerun resumes: "run_" + first 16 hex of the plan hash.
func DeriveRunID(p *plan.Plan) (string, error) {
	if p == nil {
		return "", fmt.Errorf("%w: no plan", ErrInvalidPlan)
	}
	h, err := plan.Hash(p)
	if err != nil {
		return "", fmt.Errorf("executor: derive run id: %w", err)
	}
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) < 16 {
		return "", fmt.Errorf("executor: derive run id: unexpected plan hash %q", h)
	}
	return "run_" + h[:16], nil
}

// backoff returns the wait before retry k (1-based) under r: drawn from
// r.backoffRange(k), and at least floor (a server's Retry-After).
func (e *Engine) backoff(r RetryPolicy, k int, floor time.Duration) time.Duration {
	lo, hi := r.backoffRange(k)
	d := lo
	if hi > lo {
		e.randMu.Lock()
		d += time.Duration(e.cfg.Rand.Int64N(int64(hi-lo) + 1))
		e.randMu.Unlock()
	}
	return max(d, floor)
}

// retryOf is the retry policy for a tool: the engine's, with the tool's
// own settings in place.
func (e *Engine) retryOf(s tools.Spec) RetryPolicy { return e.cfg.Retry.forTool(s.Retry) }

// waitWithin shortens a backoff so that the next attempt starts by by (the
// end of the retry budget; zero: no bound), never below floor.
func waitWithin(wait, floor time.Duration, now, by time.Time) time.Duration {
	if by.IsZero() {
		return wait
	}
	return max(min(wait, by.Sub(now)), floor, 0)
}
