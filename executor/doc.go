// Package executor runs recorded plans so that every action happens exactly once
// in effect. It is the library API that other Go programs and workflow engines
// embed: build an Engine with New, then Run a plan under a run id, Resume it after
// approvals, resolutions or a restart, Replay it with edits or Fork it.
//
// For every ready action (all its dependencies succeeded), in dependency order and
// independent actions in parallel, the engine resolves references to earlier
// outputs, validates the resolved arguments, derives the action's key
// (plan.Key), claims the key durably in the ledger, calls the tool according to
// its effect class (tools/README.md, "Effect classes") and records the outcome durably
// before any dependent is claimed. A key that already succeeded returns its stored
// output without calling the tool. When an outcome and a dependent's claim are
// ready together they share one ledger.Apply call, so a chain costs one synced
// commit per action.
//
// Decisions this package makes beyond the effect classes (executor/README.md, Decisions):
//
//   - A rejected action fails the run "cleanly": no new action starts, every
//     action that was never claimed is skipped, and nothing is compensated (the
//     reviewers let the earlier actions happen).
//   - A definite failure (a 4xx, or retries of a call that was never sent running
//     out) fails the run: no new action starts, never-claimed actions are skipped
//     and the compensations of succeeded actions run in reverse completion order
//     as actions "<id>.undo". Compensating actions need no approval.
//     Before that, every action that was ever claimed and has no outcome (in
//     flight, or pending a retry after an unknown or not-sent attempt, also
//     when found so after a restart) is brought to one by its class
//     (succeeded, failed, or needs_review): its call may have taken effect,
//     so it is never skipped as "not started", and compensation sees it if
//     it succeeded.
//   - An action a person resolves with Skip counts as done without output: its
//     dependents are skipped and the run can still complete.
//   - If an action waits for a person (needs_review) the run is paused, even when
//     another action failed: once the person resolves it, Resume finishes the
//     failure handling (including compensating the resolved action if it was
//     marked done).
//   - Cancel leaves never-claimed actions as they are (pending or approved).
//   - A retry after a failure that was not sent (or not processed, 429/503
//     with Retry-After) calls again without a lookup: nothing can commit late.
//     After an unknown outcome, or on resuming a claim or a pending retry
//     recorded by an earlier process, a lookup tool always looks first.
//   - That lookup, and its wait for "not found" to become trustworthy, run
//     before the next attempt is claimed, while the previous attempt's claim
//     (or pending record) stands: every claim is recorded immediately before
//     its call is sent, so the trust window counted from the previous claim
//     also covers a write that was sent after a long lookup wait.
//   - Retries that run out on calls that were not sent (or not processed)
//     end in needs_review, not failed, when an earlier attempt's outcome is
//     unknown (in this drive, or per the key record's MaybeTookEffect for
//     an earlier one) and no trusted lookup has shown since that it took no
//     effect. A key record written before that fact existed (no
//     FirstClaimedAt) that was attempted counts as "may have taken effect".
//   - key_ttl is counted from the first claim of the key, the key record's
//     FirstClaimedAt (on a record written before it existed: the claim of
//     attempt 1, else key_ttl counts as passed).
//
// All of these decisions, and the class table and failure classes (tools/README.md),
// are made in one pure function (decide, decide.go) of the facts: the
// effect class, the tool's key_ttl, lookup, timeout and visibility_lag,
// the key record, the last failure, the retry budget and the time. The
// driver gathers the facts and performs the decision.
//   - Retry budgets (RetryPolicy, or a tool's own tools.Spec.Retry) count
//     the attempts and the time of one drive; a person's "retry" starts a
//     fresh budget. They set when and how often an attempt is retried, never
//     whether it may be: that stays the effect class's rule.
//   - Replay moves a finished (completed, failed, cancelled) run back to
//     running for the new revision.
//   - An approval needed because resolved arguments differ from the approved
//     ones is asked with the resolved arguments written into the row (event
//     action.args_resolved, not action.edited: no person changed it), so
//     Approve approves exactly what will be sent.
//
// In-process coordination: Badger's directory lock means one process owns a
// ledger, so engines sharing a ledger.Store coordinate in memory: a key held
// by one goroutine is awaited by the others (never called concurrently), and
// Pause/Cancel exclude new claims of the run while they are written. That
// state lives on the store handle (ledger.Store.Local); the package has no
// mutable globals.
//
// Imports: the standard library, plan, tools (and tools/policy, the policy
// rules it evaluates) and ledger.
package executor
