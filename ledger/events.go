package ledger

// EventType names an event of a run's log (ledger/README.md, "Events"). Every type
// that any docket package writes is a constant here; the ledger writes the
// action.* state transitions and run.created, plan.recorded, run.replayed,
// run.tools_changed, run.paused and run.resumed itself, the executor the
// others through SetRunStatus and Note.
type EventType string

const (
	EventRunCreated          EventType = "run.created"
	EventPlanRecorded        EventType = "plan.recorded"
	EventRunReplayed         EventType = "run.replayed"
	EventRunToolsChanged     EventType = "run.tools_changed"
	EventRunAwaitingApproval EventType = "run.awaiting_approval"
	EventRunPaused           EventType = "run.paused"
	EventRunResumed          EventType = "run.resumed"
	EventRunCompleted        EventType = "run.completed"
	EventRunFailed           EventType = "run.failed"
	EventRunCancelled        EventType = "run.cancelled"

	EventActionApproved EventType = "action.approved"
	EventActionRejected EventType = "action.rejected"
	EventActionEdited   EventType = "action.edited"
	// EventActionArgsResolved: docket filled in an action's references to
	// show a reviewer the arguments that will be sent (ShowResolved):
	// {"args"} ({"args_truncated":true} for 64 KiB or more). Like an edit,
	// the approvals of the earlier arguments stop counting; unlike one, no
	// person changed anything.
	EventActionArgsResolved  EventType = "action.args_resolved"
	EventActionClaimed       EventType = "action.claimed"
	EventActionSucceeded     EventType = "action.succeeded"
	EventActionAttemptFailed EventType = "action.attempt_failed"
	EventActionFailed        EventType = "action.failed"
	EventActionNeedsReview   EventType = "action.needs_review"
	EventActionResolved      EventType = "action.resolved"
	EventActionSkipped       EventType = "action.skipped"
	EventActionCompensated   EventType = "action.compensated"
	// EventLookupWait: the lookup that runs before an attempt waits (no
	// state change): {"attempt", "outcome", "retry_in", "retry_in_ms"} with
	// outcome "not_found_yet" (not found, but "not found" is not trusted
	// yet: waiting before writing; also "reason") or "lookup_error" (the
	// lookup failed and is tried again; also "error"). Written by the
	// executor through Note.
	EventLookupWait EventType = "action.lookup_wait"
	// EventLimitWait: an action waits for a slot or a start of its tool
	// (the ledger refused its claim with a *LimitError; no state change, no
	// attempt counted): {"attempt", "tool", "reason" ("max_in_flight" or
	// "rate"), "in_flight", "max_in_flight" or "started", "rate", "per",
	// "retry_at"}. Written by the executor through Note, once per wait.
	EventLimitWait EventType = "action.limit_wait"
	// EventActionPolicy: the policy decided for the action (Decide):
	// {"rule","outcome","need","approvals", and "message","why","names",
	// "exclude_creator","ttl" when set}.
	EventActionPolicy EventType = "action.policy"
	// EventActionApprovalAdded: a person approved an action that needs
	// more approvals than it has: {"by","approvals","need"}. The approval
	// that completes the count is action.approved.
	EventActionApprovalAdded EventType = "action.approval_added"
)
