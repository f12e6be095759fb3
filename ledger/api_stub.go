package ledger

// SCAFFOLD: the ledger helper replaces this file with the real implementation.
// The exported names and signatures here are a contract with executor/ and cmd/:
// keep them (adding more is fine). It exists so that other packages compile meanwhile.

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/docketrun/docket/plan"
)

// Errors callers test with errors.Is.
var (
	ErrNotFound     = errors.New("ledger: not found")
	ErrConflict     = errors.New("ledger: conflict") // a conditional write found another state (see *ConflictError)
	ErrPlanMismatch = errors.New("ledger: run exists with a different plan")
	ErrLocked       = errors.New("ledger: data directory is in use by another process")
	ErrTooLarge     = errors.New("ledger: value too large")
	ErrFormat       = errors.New("ledger: unknown or newer data format")
	ErrClosed       = errors.New("ledger: closed")
)

// ConflictError is returned (errors.Is(err, ErrConflict)) when a conditional
// write finds the record in another state. Current is the record as it is now.
type ConflictError struct {
	RunID, ActionID, Key string
	Op                   string    // "claim", "succeed", ...
	Current              KeyRecord // the record that is in the way
	Msg                  string
}

func (e *ConflictError) Error() string        { panic("scaffold") }
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Clock gives the time; tests pin it.
type Clock interface{ Now() time.Time }

// Config opens a ledger. Zero values take the documented defaults (WithDefaults).
type Config struct {
	Dir            string        // data directory (required)
	Logger         *slog.Logger  // default: slog.Default(), with component=ledger
	Clock          Clock         // default: real time
	MaxOutputBytes int           // default 16 MiB + 1 MiB headroom; larger outputs: ErrTooLarge
	GCInterval     time.Duration // value-log GC ticker; default 5m
	MemTableSize   int64         // default chosen for a small idle RSS (document it)
	// AfterSync, when set, is called by the committer right after each durable
	// sync and before any acknowledgement of the writes it covered (test hook).
	AfterSync func()
	// BeforeAck, when set, is called before each acknowledgement (test hook, lets
	// a test assert that a sync happened first).
	BeforeAck func()
}

// Status is an action status (DESIGN.md).
type Status string

const (
	StatusPending     Status = "pending"
	StatusApproved    Status = "approved"
	StatusRejected    Status = "rejected"
	StatusClaimed     Status = "claimed"
	StatusSucceeded   Status = "succeeded"
	StatusFailed      Status = "failed"
	StatusNeedsReview Status = "needs_review"
	StatusSkipped     Status = "skipped"
	StatusCompensated Status = "compensated"
)

// RunStatus is a run status (DESIGN.md).
type RunStatus string

const (
	RunPlanning         RunStatus = "planning"
	RunAwaitingApproval RunStatus = "awaiting_approval"
	RunRunning          RunStatus = "running"
	RunPaused           RunStatus = "paused"
	RunCompleted        RunStatus = "completed"
	RunFailed           RunStatus = "failed"
	RunCancelled        RunStatus = "cancelled"
)

// Run is a run's header.
type Run struct {
	ID        string    `json:"run_id"`
	Status    RunStatus `json:"status"`
	Revision  int       `json:"revision"` // current plan revision, 1-based
	Goal      string    `json:"goal"`
	Policy    string    `json:"policy"`    // "all" | "safe" | "none"
	PlanHash  string    `json:"plan_hash"` // plan.Hash of revision 1 (identity of the run)
	ToolsHash string    `json:"tools_hash"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	Error     string    `json:"error,omitempty"`
}

// Action is one action of a run's current revision: the row of the Run JSON.
// Its execution state mirrors its current key's KeyRecord once it has a key.
type Action struct {
	RunID        string          `json:"-"`
	ID           string          `json:"id"`
	Tool         string          `json:"tool"`
	Class        string          `json:"class"`
	Key          string          `json:"key"` // "" until the action is claimed (args resolved)
	Status       Status          `json:"status"`
	Attempts     int             `json:"attempts"`
	Args         json.RawMessage `json:"args"` // as planned (or edited); resolved once claimed
	DependsOn    []string        `json:"depends_on"`
	Output       json.RawMessage `json:"output"`
	Error        string          `json:"error"`
	ApprovedArgs json.RawMessage `json:"-"` // the args the approval was given for (nil: not approved)
	Undo         bool            `json:"-"` // a compensating action "<id>.undo"
}

// KeyRecord is the execution truth for one idempotency key.
type KeyRecord struct {
	Key       string          `json:"key"`
	RunID     string          `json:"run_id"`
	ActionID  string          `json:"action_id"`
	Tool      string          `json:"tool"`
	Args      json.RawMessage `json:"args"`    // resolved arguments the key was derived from
	State     Status          `json:"state"`   // pending, claimed, succeeded, failed, needs_review, skipped, compensated
	Attempt   int             `json:"attempt"` // number of the latest claim (0: never claimed)
	Owner     string          `json:"owner"`   // incarnation of the latest claim
	ClaimedAt time.Time       `json:"claimed_at"`
	Output    json.RawMessage `json:"output,omitempty"`
	Error     string          `json:"error,omitempty"`
	Retryable bool            `json:"retryable,omitempty"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// Event is one entry of a run's event log (DESIGN.md "Events").
type Event struct {
	Seq      uint64          `json:"seq"`
	RunID    string          `json:"run_id"`
	Type     string          `json:"type"`
	ActionID string          `json:"action_id,omitempty"`
	At       time.Time       `json:"at"`
	Data     json.RawMessage `json:"data,omitempty"`
}

// RunDoc is the Run JSON of DESIGN.md's contracts.
type RunDoc struct {
	Run     Run
	Actions []Action
}

// MarshalJSON writes exactly the Run JSON shape.
func (d RunDoc) MarshalJSON() ([]byte, error) { panic("scaffold") }

// ListOptions pages through runs, newest first.
type ListOptions struct {
	Status RunStatus // filter ("" = all)
	After  string    // cursor returned by the previous page ("" = first page)
	Limit  int       // default 50, max 1000
}

// Ledger is the durable state of docket, in one Badger directory.
type Ledger struct{}

// Open opens (creating if needed) the data directory.
func Open(ctx context.Context, cfg Config) (*Ledger, error) { panic("scaffold") }

// Close stops the committer (after flushing acknowledged writes) and closes Badger.
func (l *Ledger) Close() error { panic("scaffold") }

// Incarnation is this handle's random owner id, recorded in every claim.
func (l *Ledger) Incarnation() string { panic("scaffold") }

// CreateRun records a run with revision 1 of its plan and its initial action rows
// (in plan order, status pending or approved, class filled), plus events
// run.created and plan.recorded (and action.approved for pre-approved rows).
// If the run exists with the same plan hash it returns the stored run and
// created=false; with another plan hash, ErrPlanMismatch.
func (l *Ledger) CreateRun(ctx context.Context, r Run, p *plan.Plan, rows []Action) (stored Run, created bool, err error) {
	panic("scaffold")
}

// AddRevision records revision n+1 of a run's plan with fresh rows (replay with
// edits) and event run.replayed. Returns the new revision number.
func (l *Ledger) AddRevision(ctx context.Context, runID string, p *plan.Plan, rows []Action) (int, error) {
	panic("scaffold")
}

// GetRun returns a run's header. ErrNotFound.
func (l *Ledger) GetRun(ctx context.Context, runID string) (Run, error) { panic("scaffold") }

// ListRuns pages through runs newest first; next is "" on the last page.
func (l *Ledger) ListRuns(ctx context.Context, o ListOptions) (runs []Run, next string, err error) {
	panic("scaffold")
}

// Plan returns revision rev of a run's plan (0 = current). ErrNotFound.
func (l *Ledger) Plan(ctx context.Context, runID string, rev int) (*plan.Plan, error) {
	panic("scaffold")
}

// Actions returns the rows of the run's current revision in plan order, followed
// by compensating rows ("<id>.undo") in the order they were added. Cost scales
// with the run's size, not the ledger's.
func (l *Ledger) Actions(ctx context.Context, runID string) ([]Action, error) { panic("scaffold") }

// Doc returns the Run JSON document. ErrNotFound.
func (l *Ledger) Doc(ctx context.Context, runID string) (RunDoc, error) { panic("scaffold") }

// Key returns the record of an idempotency key. ErrNotFound.
func (l *Ledger) Key(ctx context.Context, key string) (KeyRecord, error) { panic("scaffold") }

// Events returns up to limit events of a run with seq > after (limit <= 0: all).
func (l *Ledger) Events(ctx context.Context, runID string, after uint64, limit int) ([]Event, error) {
	panic("scaffold")
}

// Subscription delivers a run's events in order, without gaps or duplicates.
type Subscription struct {
	C <-chan Event // closed when the subscription ends; then Err says why
}

// Err is nil while running; after C is closed it says why (context ended,
// ErrLagged when the subscriber fell behind: resubscribe from the last seq seen).
func (s *Subscription) Err() error { panic("scaffold") }

// Close ends the subscription.
func (s *Subscription) Close() { panic("scaffold") }

// ErrLagged ends a subscription whose reader fell behind; resubscribe with the
// last seq it saw.
var ErrLagged = errors.New("ledger: subscriber fell behind")

// Subscribe delivers the backlog after seq `after` and then live events. A slow
// reader never blocks writers: it is ended with ErrLagged instead.
func (l *Ledger) Subscribe(ctx context.Context, runID string, after uint64) (*Subscription, error) {
	panic("scaffold")
}

// Memo stores value under (runID, name) if nothing is stored yet and returns
// what is stored (so a value derived once, like a UUID or a time, never changes
// on resume). Durable before it returns.
func (l *Ledger) Memo(ctx context.Context, runID, name string, value json.RawMessage) (json.RawMessage, error) {
	panic("scaffold")
}

// Op is one conditional change to the ledger; build it with the constructors
// below. Apply commits ops atomically per call (all in one transaction, shared
// with other callers' ops by group commit) and durably before returning.
type Op struct{ _ int }

// Result is the outcome of one Op: Err is nil, a *ConflictError, or another
// error for that op; Action and Key are the row and key record after the op.
type Result struct {
	Err    error
	Action Action
	Key    KeyRecord
}

// Apply validates each op against the state left by the ops before it (in the
// same call and in earlier commits), commits all that are valid in one
// transaction with their events, syncs, and then returns one Result per op.
// The returned error is for the commit as a whole (disk full, closed): then no
// op was applied.
func (l *Ledger) Apply(ctx context.Context, ops ...Op) ([]Result, error) { panic("scaffold") }

// Claim claims key for attempt n of action (runID, actionID): the key record
// must be absent (n == 1), or pending with Attempt == n-1, or claimed with
// Attempt == n-1 by an owner that is not this incarnation (a dead process).
// Records args, owner, claimed_at; row -> claimed, key set, args resolved;
// event action.claimed {"attempt","key"}. Otherwise *ConflictError with the
// current record (e.g. succeeded: the caller uses its stored Output).
func Claim(runID, actionID, tool, key string, args json.RawMessage, n int) Op { panic("scaffold") }

// Succeed records output for attempt n: the key must be claimed with Attempt n
// (by any owner: a lookup may find the effect of a dead owner's claim).
// Row -> succeeded; event action.succeeded {"output"} (or {"output_truncated":true}
// above 64 KiB). Identical repeat: success. ErrTooLarge above MaxOutputBytes.
func Succeed(key string, n int, output json.RawMessage) Op { panic("scaffold") }

// Fail records a failed attempt n (key claimed with Attempt n). retryable: key
// and row back to pending (next claim is n+1), event action.attempt_failed
// {"attempt","error","outcome", plus data}; else failed, event action.failed.
func Fail(key string, n int, msg string, retryable bool, data json.RawMessage) Op { panic("scaffold") }

// NeedsReview parks attempt n (key claimed with Attempt n) for a person:
// row and key -> needs_review, event action.needs_review {"attempt","reason"}.
func NeedsReview(key string, n int, reason string) Op { panic("scaffold") }

// Resolution is what a person decided for an action in needs_review.
type Resolution struct {
	Done  json.RawMessage // mark done with this output (validated by the caller)
	Retry bool            // back to pending: one more attempt (counts as approval of it)
	Skip  bool            // skipped: dependents see no output
	By    string          // who (free text, no secrets)
}

// Resolve applies a person's resolution to the action's current key, which must
// be in needs_review. Event action.resolved {"resolution", "by"} (and
// action.skipped for Skip).
func Resolve(runID, actionID string, r Resolution) Op { panic("scaffold") }

// Approve marks a not-yet-claimed row approved for exactly these args (the
// args the reviewer saw). Event action.approved {"by"}. Also allowed on a row
// in needs_review/pending after an unknown outcome? No: use Resolve.
func Approve(runID, actionID string, args json.RawMessage, by string) Op { panic("scaffold") }

// Reject marks a not-yet-claimed row rejected. Event action.rejected {"reason","by"}.
func Reject(runID, actionID, reason, by string) Op { panic("scaffold") }

// Edit replaces a not-yet-claimed row's planned args (clears any approval).
// Event action.edited {"args"}.
func Edit(runID, actionID string, args json.RawMessage, by string) Op { panic("scaffold") }

// Skip marks a not-yet-claimed row skipped (e.g. a dependent of a rejected or
// failed action when the run ends). Event action.skipped {"reason"}.
func Skip(runID, actionID, reason string) Op { panic("scaffold") }

// Compensated marks a succeeded row compensated (its "<id>.undo" succeeded).
// Event action.compensated.
func Compensated(runID, actionID string) Op { panic("scaffold") }

// AddUndo appends a compensating row "<id>.undo" (status pending, Undo true)
// to the run if it is not there yet (identical repeat: success).
func AddUndo(runID string, row Action) Op { panic("scaffold") }

// SetRunStatus moves a run to status with an event of type eventType (e.g.
// "run.paused", "run.completed") carrying data; errMsg is stored in Run.Error.
// If the run already has that status and eventType is "", nothing is written.
func SetRunStatus(runID string, status RunStatus, eventType, errMsg string, data json.RawMessage) Op {
	panic("scaffold")
}

// Note appends an event without a state change (e.g. "run.awaiting_approval",
// "action.attempt_failed" for an unclaimed lookup wait).
func Note(runID, eventType, actionID string, data json.RawMessage) Op { panic("scaffold") }
