package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
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
	// ErrInvalid reports an argument the ledger refuses (empty id, bad JSON, ...).
	ErrInvalid = errors.New("ledger: invalid argument")
)

// ErrNoSpace: the file system of a durable store's data directory has too little free space
// for the ledger to write safely. Nothing of the refused write was applied
// and nothing acknowledged earlier is lost: free space and retry (a process
// that opened the directory while it was full reads but does not write until
// it opens it again).
var ErrNoSpace = errors.New("ledger: no space left")

// ErrLeaseExpired: the writer's node lease on a shared ledger lapsed (a
// pause longer than the lease, a lost connection): the commit was refused
// and nothing of it was written. Its claims may be taken over by other
// nodes; the store re-registers with a new incarnation, so a caller drops
// what it was driving and starts again (see ledger/postgres).
var ErrLeaseExpired = errors.New("ledger: node lease expired")

// ErrUnavailable: a shared ledger's database could not be reached (for
// longer than the store waits), or the connection broke during a COMMIT
// whose outcome is therefore unknown (read the records to find out: an
// identical retry of an outcome is success). Nothing acknowledged is lost;
// try again once the database is back.
var ErrUnavailable = errors.New("ledger: database unavailable")

// ErrLagged ends a subscription whose reader fell behind; resubscribe with the
// last seq it saw.
var ErrLagged = errors.New("ledger: subscriber fell behind")

// ConflictError is returned (errors.Is(err, ErrConflict)) when a conditional
// write finds the record in another state. Current is the record as it is now
// (the zero KeyRecord when the key has no record yet).
type ConflictError struct {
	RunID, ActionID, Key string
	Op                   string    // "claim", "succeed", ...
	Current              KeyRecord // the record that is in the way
	Msg                  string
}

func (e *ConflictError) Error() string {
	s := fmt.Sprintf("ledger: %s conflict on run %q action %q", e.Op, e.RunID, e.ActionID)
	if e.Key != "" {
		s += fmt.Sprintf(" key %s", e.Key)
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Current.State != "" {
		s += fmt.Sprintf(" (current state %s, attempt %d", e.Current.State, e.Current.Attempt)
		if e.Current.Owner != "" {
			s += ", owner " + e.Current.Owner
		}
		s += ")"
	}
	return s
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Clock gives the time; tests pin it.
type Clock interface{ Now() time.Time }

// RealClock is the system clock, every store's default.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// Status is an action status (ledger/README.md, Action state machine).
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

// RunStatus is a run status (ledger/README.md, Action state machine).
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

func (s RunStatus) valid() bool {
	switch s {
	case RunPlanning, RunAwaitingApproval, RunRunning, RunPaused, RunCompleted, RunFailed, RunCancelled:
		return true
	}
	return false
}

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
	UpdatedAt time.Time `json:"updated_at"` // last change of the run or of any of its actions
	Error     string    `json:"error,omitempty"`
	// PausedBy names the person who paused the run (SetPause); "" when the
	// run is not paused by a person. Only an explicit resume clears it: a
	// run paused by a person stays paused whoever drives it.
	PausedBy string `json:"paused_by,omitempty"`
	// CreatedBy is the identity that created the run ("token:NAME",
	// "cli:USER"; "" when not known, as on runs recorded before it existed).
	// A policy rule may exclude it from approving the run's actions.
	CreatedBy string `json:"created_by,omitempty"`
	// AuditHash is the hash of the run's last event (the head of its audit
	// chain, see VerifyChain); "" for a run whose events are not chained.
	AuditHash string `json:"audit_hash,omitempty"`
	// WakeAt is when a drive should take the run up again: the earliest
	// time one of its waiting actions is due (timer.go); zero: none.
	WakeAt time.Time `json:"waiting_until,omitzero"`
	// Retention is how long the run is kept after it ended (0: as the
	// store's collector is told, see Collector; ledger/README.md,
	// Retention).
	Retention Duration `json:"retention,omitempty"`
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
	// Gate is what the policy decided for the action (nil: recorded before
	// gates existed, or no decision yet: one approval suffices).
	Gate *Gate `json:"-"`
	// Approvals are the people's approvals of the action in this revision.
	Approvals []Approval `json:"-"`
	// Timer is when the action may start (nil: at once), timer.go.
	Timer *Timer `json:"timer,omitempty"`
	// ToolWait is what the action waits for while its tool's limits
	// refuse its claim (nil: nothing), toolwait.go.
	ToolWait *ToolWait `json:"tool_wait,omitempty"`
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

	// Safety facts the executor decides from (never parsed back out of
	// events). Records written before they existed lack them: a zero
	// FirstClaimedAt says so.

	// FirstClaimedAt is when attempt 1 was claimed; later claims keep it.
	// key_ttl counts from it.
	FirstClaimedAt time.Time `json:"first_claimed_at,omitzero"`
	// MaybeTookEffect: an earlier attempt of this key may have taken
	// effect. Set when a claim takes over a claimed record that has no
	// outcome (its process is gone), when a failure of class unknown or
	// key_in_flight (or an unclassified retryable one) is recorded, and when
	// the key goes to needs_review; cleared by a person's resolution; kept
	// otherwise.
	MaybeTookEffect bool `json:"maybe_took_effect,omitempty"`
	// Failure is the class of the latest recorded failure (FailWith), ""
	// when the latest outcome was not a classified failure.
	Failure Failure `json:"failure,omitempty"`
}

// Failure classifies a failed attempt (tools/README.md, "Failures"): the
// executor's failure classes as the ledger records them.
type Failure string

const (
	FailureNotSent      Failure = "not_sent"      // nothing reached the other side
	FailureNotProcessed Failure = "not_processed" // 429/503 with Retry-After: nothing processed
	FailureDefinite     Failure = "definite"      // an answer that says it did not happen
	FailureUnknown      Failure = "unknown"       // sent, no trustworthy answer: may have taken effect
	FailureKeyInFlight  Failure = "key_in_flight" // a keyed provider still processes a request with the key
	FailureInvalidArgs  Failure = "invalid_arguments"
)

// mayHaveTakenEffect reports whether a retryable failure of class f leaves
// an effect possible: unknown, key in flight, or unclassified.
func (f Failure) mayHaveTakenEffect() bool {
	switch f {
	case FailureNotSent, FailureNotProcessed, FailureDefinite, FailureInvalidArgs:
		return false
	}
	return true
}

// Event is one entry of a run's event log (ledger/README.md, "Events").
type Event struct {
	Seq      uint64          `json:"seq"`
	RunID    string          `json:"run_id"`
	Type     EventType       `json:"type"`
	ActionID string          `json:"action_id,omitempty"`
	At       time.Time       `json:"at"`
	Data     json.RawMessage `json:"data,omitempty"`
	// Hash chains the run's events (ChainHash): "" on runs from before the
	// audit chain, or recorded by a backend without it.
	Hash string `json:"hash,omitempty"`
}

// RunDoc is the Run JSON (ledger/README.md, Run JSON).
type RunDoc struct {
	Run     Run
	Actions []Action
	// TraceID is the OpenTelemetry trace id of the run's spans (32 hex
	// digits), set by whoever serves the document when tracing is on
	// (executor/oteltrace.TraceID); "" leaves trace_id out.
	TraceID string
}

// MarshalJSON writes exactly the Run JSON shape: run_id, status, revision,
// goal, policy, created_at, updated_at, actions, error, trace_id when
// tracing is on and retention when the run has its own (additive fields). Times are RFC 3339 UTC; depends_on is []
// rather than null.
func (d RunDoc) MarshalJSON() ([]byte, error) {
	actions := make([]Action, len(d.Actions))
	for i, a := range d.Actions {
		if a.DependsOn == nil {
			a.DependsOn = []string{}
		}
		if len(a.Args) == 0 {
			a.Args = json.RawMessage("null")
		}
		actions[i] = a
	}
	return json.Marshal(struct {
		RunID     string    `json:"run_id"`
		Status    RunStatus `json:"status"`
		Revision  int       `json:"revision"`
		Goal      string    `json:"goal"`
		Policy    string    `json:"policy"`
		CreatedAt time.Time `json:"created_at"`
		UpdatedAt time.Time `json:"updated_at"`
		Actions   []Action  `json:"actions"`
		Error     string    `json:"error"`
		TraceID   string    `json:"trace_id,omitempty"`
		WakeAt    time.Time `json:"waiting_until,omitzero"`
		Retention string    `json:"retention,omitempty"`
	}{d.Run.ID, d.Run.Status, d.Run.Revision, d.Run.Goal, d.Run.Policy,
		d.Run.CreatedAt.UTC(), d.Run.UpdatedAt.UTC(), actions, d.Run.Error, d.TraceID, d.Run.WakeAt.UTC(), retentionText(time.Duration(d.Run.Retention))})
}

// ListOptions pages through runs, newest first.
type ListOptions struct {
	Status RunStatus // filter ("" = all)
	After  string    // cursor returned by the previous page ("" = first page)
	Limit  int       // default 50, max 1000
}
