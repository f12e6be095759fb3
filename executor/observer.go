package executor

import (
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
)

// Observer is told what the engine does, as it happens: metrics, traces and
// the service's live views are built on it, never on log text or test hooks.
// Calls come from the engine's goroutines, after the fact they report is
// durable in the ledger; an Observer must be safe for concurrent use and
// return quickly (it must not call back into the engine).
type Observer interface {
	// PlanRecorded: revision rev of run runID was recorded with n actions
	// (revision 1 by Record/Run, later ones by Replay).
	PlanRecorded(runID string, rev, n int)
	// AttemptStarted: attempt n of an action was claimed and its tool is
	// about to be called.
	AttemptStarted(a AttemptInfo)
	// AttemptEnded: the attempt's outcome is recorded.
	AttemptEnded(a AttemptInfo, r AttemptResult)
	// LookupDone: a lookup before a write answered; found says whether the
	// effect was found (and adopted as the output).
	LookupDone(a AttemptInfo, found bool)
	// Adopted: the action's key had already succeeded (a replay of an
	// unchanged action, a drive racing another): its recorded output was
	// taken and the tool was not called, a duplicate prevented.
	Adopted(a AttemptInfo)
	// NeedsReview: an action needs a person (outcome unknown, retries spent,
	// a refusal after an unknown attempt, ...).
	NeedsReview(a AttemptInfo, reason string)
	// RunStatus: the run's status changed to st.
	RunStatus(runID string, st ledger.RunStatus)
}

// ApprovalObserver is an Observer that is also told when a person's
// approval lets an action start. Implementing it is optional: the engine
// (and Observers) tell the observers that implement it.
type ApprovalObserver interface {
	// Approved: action actionID of run runID is approved (the approval its
	// gate needs, the last one when it needs several), durably; a drive may
	// claim it now.
	Approved(runID, actionID string)
}

// AttemptInfo names one attempt of one action.
type AttemptInfo struct {
	RunID    string
	ActionID string
	Tool     string
	Class    tools.Class
	Key      string
	Attempt  int
}

// AttemptResult is how an attempt ended.
type AttemptResult struct {
	OK      bool          // the call succeeded; its output is recorded
	Failure tools.Outcome // when !OK: not sent, not processed, definite, unknown, key in flight
	Took    time.Duration // the tool call's duration
}

// NopObserver observes nothing; embed it to implement only some methods.
type NopObserver struct{}

func (NopObserver) PlanRecorded(string, int, int)           {}
func (NopObserver) AttemptStarted(AttemptInfo)              {}
func (NopObserver) AttemptEnded(AttemptInfo, AttemptResult) {}
func (NopObserver) LookupDone(AttemptInfo, bool)            {}
func (NopObserver) Adopted(AttemptInfo)                     {}
func (NopObserver) NeedsReview(AttemptInfo, string)         {}
func (NopObserver) RunStatus(string, ledger.RunStatus)      {}
