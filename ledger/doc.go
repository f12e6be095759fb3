// Package ledger is docket's durable state as the rest of docket sees it:
// runs, immutable plan revisions, one row per action of a run's current
// revision, one record per idempotency key (the execution truth), an
// append-only event log per run with a gap-free sequence, and small memos.
//
// It holds the Store interface (what the executor, planner, ui and evals
// use), the records (Run, Action, KeyRecord, Event, ...), the ops that
// change them (Claim, Succeed, ...) and the rules of the state machine,
// written once as functions over records (Eval, over a backend's Tx), plus
// what every backend shares: typed event names (EventType), the
// subscription hub (Hub) and the errors callers test. Backends live in
// subpackages named after what they wrap: ledger/badgerdb (embedded, the
// default), ledger/postgres (shared by many processes and machines) and
// ledger/memory (in-memory, for tests and evals; not durable).
// ledger/ledgertest is the conformance suite every backend passes.
//
// Imports: the standard library and docket's plan package (to hash and
// store plans); never a database. It knows nothing about running tools.
//
// # Action state machine (ledger/README.md)
//
// Key record: (absent) → claimed(attempt 1, owner, at) → succeeded(output) |
// failed(error) | needs_review | pending (retryable failure; next claim is
// attempt n+1); needs_review → succeeded (Resolve Done) | pending (Resolve
// Retry) | skipped (Resolve Skip); succeeded → compensated. A claim is a
// compare-and-swap on (state, attempt): exactly one of concurrent claimers
// wins; the others get *ConflictError with the current record. A claim whose
// owner is another incarnation (a process that is gone) may be taken over
// with attempt n+1. Outcomes are conditional on the current state; an
// identical repeat (a lost acknowledgement) is success; anything else is a
// *ConflictError carrying the run id, action id and key.
//
// Rows (the Run JSON's actions) mirror their current key's state and also
// carry review marks made before the first claim: pending → approved |
// rejected | skipped, and edits of the planned args. Every transition appends
// its event(s) in the same transaction.
//
// # Events and subscriptions
//
// Events(run, after, limit) reads the log. Subscribe registers for live
// events first, then reads the backlog, then delivers live events, skipping
// seqs it already delivered and filling any gap from the store: in order, no
// loss, no duplicates. A subscriber that falls more than SubscriberBuffer
// events behind is ended with ErrLagged (writers never wait for readers); it
// resubscribes from the last seq it saw. Outputs larger than 64 KiB are not
// inlined in events ({"output_truncated": true}); read them from the run.
//
// # Errors of Apply
//
// Apply returns one Result per op and each Result carries its op's error:
// nil, a *ConflictError, or ErrNotFound, ErrInvalid, ErrTooLarge,
// ErrPlanMismatch (the op wrote nothing; the other ops of the call were
// still applied). When the call fails as a whole (ErrClosed, a context
// error, ErrTooLarge for a call larger than one commit, ErrNoSpace, a disk
// error) nothing was applied, Apply returns that error and every Result.Err
// is that error too. ApplyOne applies one op and returns its error,
// whichever it is.
package ledger
