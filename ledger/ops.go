package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// eventInlineMax is the largest output (or args) inlined in an event.
const eventInlineMax = 64 << 10

type opKind int

const (
	opNone opKind = iota
	opClaim
	opSucceed
	opFail
	opNeedsReview
	opResolve
	opApprove
	opReject
	opEdit
	opSkip
	opCompensated
	opAddUndo
	opSetRunStatus
	opNote
	opCreateRun
	opAddRevision
	opMemo
	opSetToolsHash
	opSetPause
	opDecide
	opWait
	opRunNow
	opLimitWait
)

var opNames = [...]string{"none", "claim", "succeed", "fail", "needs_review", "resolve", "approve",
	"reject", "edit", "skip", "compensated", "add_undo", "set_run_status", "note", "create_run",
	"add_revision", "memo", "set_tools_hash", "set_pause", "decide", "wait", "run_now", "limit_wait"}

// Op is one conditional change to the ledger; build it with the constructors
// below. Apply commits ops atomically per call (all in one transaction, shared
// with other callers' ops by group commit) and durably before returning.
type Op struct {
	body   opBody // one type per kind (claimOp, succeedOp, …); nil: not built with a constructor
	misuse misuse // modifiers given to an op of a kind that does not take them
}

// opBody is the payload of one kind of op with the rule that applies it.
// Bodies are shared by copies of an Op: eval never changes its receiver.
type opBody interface {
	kind() opKind
	// eval applies the op to the state b shows. The Result carries the
	// op's own error (then it wrote nothing); the error is a hard one.
	// b is passed by value so that a call through the interface does not
	// move it to the heap.
	eval(b batch) (Result, error)
	// scope is the run the op names ("" for ops named by key) and its
	// large value, if any, so its result resolves without reading it back.
	scope() (runID string, big *bigValue)
}

// misuse records a modifier (Decided, Parking, Uncounted, WithCharges,
// WithLimits, NoEffect) applied to an op whose kind does not take it: the op is then
// ErrInvalid.
type misuse uint8

const (
	misuseBasis misuse = 1 << iota
	misuseCharges
	misuseNoEffect
	misuseLimits
)

func (m misuse) err() error {
	switch {
	case m&misuseBasis != 0:
		return fmt.Errorf("%w: only a claim says what it was decided from", ErrInvalid)
	case m&misuseCharges != 0:
		return fmt.Errorf("%w: only a claim carries budget charges", ErrInvalid)
	case m&misuseLimits != 0:
		return fmt.Errorf("%w: only a claim carries tool limits", ErrInvalid)
	case m&misuseNoEffect != 0:
		return fmt.Errorf("%w: only a failure or a skip says no attempt took effect", ErrInvalid)
	}
	return nil
}

// at names a row: an action of a run's current revision.
type at struct{ runID, actionID string }

func (a at) scope() (string, *bigValue) { return a.runID, nil }

// Result is the outcome of one Op: Err is nil, a *ConflictError, or another
// error for that op; Action and Key are the row and key record after the op.
type Result struct {
	Err    error
	Action Action
	Key    KeyRecord

	// internal ops (CreateRun, AddRevision, Memo)
	run     Run
	created bool
	rev     int
	memo    json.RawMessage
}

// Claim claims key for attempt n of action (runID, actionID): the key record
// must be absent (n == 1), or pending with Attempt == n-1, or claimed with
// Attempt == n-1 by an owner that is not this incarnation (a dead process).
// Records args, owner, claimed_at; row -> claimed, key set, args resolved;
// event action.claimed {"attempt","key"}. Otherwise *ConflictError with the
// current record (e.g. succeeded: the caller uses its stored Output). When the
// key already has an outcome (a replay's unchanged action re-derives a key
// that succeeded), the current revision's row is linked to it (key, status,
// attempts mirror the record) although the claim itself conflicts.
// A row that is rejected, skipped or compensated, or claimed under another
// key, conflicts too. Missing run or row: ErrNotFound.
func Claim(runID, actionID, tool, key string, args json.RawMessage, n int) Op {
	return Op{body: &claimOp{runID: runID, actionID: actionID, tool: tool, key: key, args: args, n: n, big: bigOf(args)}}
}

// Succeed records output for attempt n: the key must be claimed with Attempt n
// (by any owner: a lookup may find the effect of a dead owner's claim).
// Row -> succeeded; event action.succeeded {"output"} (or {"output_truncated":true}
// above 64 KiB). Identical repeat: success. ErrTooLarge above MaxOutputBytes;
// ErrNotFound for an unknown key; ErrInvalid for output that is not JSON.
func Succeed(key string, n int, output json.RawMessage) Op {
	return Op{body: &succeedOp{key: key, n: n, output: output}}
}

// Fail records a failed attempt n (key claimed with Attempt n). retryable: key
// and row back to pending (next claim is n+1), event action.attempt_failed
// {"attempt","error","outcome", plus data}; else failed, event action.failed
// {"attempt","error","outcome", plus data}. data, if given, is a JSON object
// whose fields are merged in; "outcome" defaults to "retryable" / "failed".
// Identical repeat: success.
func Fail(key string, n int, msg string, retryable bool, data json.RawMessage) Op {
	return Op{body: &failOp{key: key, n: n, msg: msg, retryable: retryable, data: data}}
}

// FailWith is Fail with the failure's class, recorded on the key record
// (KeyRecord.Failure; unknown and key_in_flight set MaybeTookEffect) and, unless
// data says otherwise, as the event's "outcome".
func FailWith(key string, n int, msg string, retryable bool, class Failure, data json.RawMessage) Op {
	return Op{body: &failOp{key: key, n: n, msg: msg, retryable: retryable, failure: class, data: data}}
}

// NeedsReview parks attempt n (key claimed with Attempt n) for a person:
// row and key -> needs_review (Error holds the reason), event
// action.needs_review {"attempt","reason"}. Identical repeat: success.
func NeedsReview(key string, n int, reason string) Op {
	return Op{body: &needsReviewOp{key: key, n: n, reason: reason}}
}

// Resolution is what a person decided for an action in needs_review.
type Resolution struct {
	Done  json.RawMessage // mark done with this output (validated by the caller)
	Retry bool            // back to pending: one more attempt (counts as approval of it)
	Skip  bool            // skipped, it did not take effect: dependents see no output, budgets get it back
	By    string          // who (free text, no secrets)
}

// Resolve applies a person's resolution to the action's current key, which must
// be in needs_review. Event action.resolved {"resolution", "by"} (and
// action.skipped for Skip; Skip gives the key's budget reservation back, and
// the resolved event names the budgets in "budgets_released"). Exactly one of
// Done, Retry, Skip (else ErrInvalid).
// Retry sets the row's ApprovedArgs to the recorded args. Identical repeat:
// success.
func Resolve(runID, actionID string, r Resolution) Op {
	return Op{body: &resolveOp{at: at{runID, actionID}, res: r}}
}

// Approve marks a not-yet-claimed row (pending or approved, no key) approved
// for exactly these args (the args the reviewer saw; nil: the row's args).
// Event action.approved {"by"}. Identical repeat: success. A row that was
// claimed is resolved with Resolve, not approved.
func Approve(runID, actionID string, args json.RawMessage, by string) Op {
	return ApproveAs(runID, actionID, args, Approver{By: by})
}

// Approver is who approves: an identity ("token:NAME", "cli:USER") and the
// groups it belongs to as it approves (a token's groups in docket serve's
// tokens file; a CLI identity has none). The groups are recorded with the
// approval (Approval.Groups), so a gate that names groups is checked
// against the ledger alone, then and later.
type Approver struct {
	By     string
	Groups []string
}

// ApproveAs is Approve by who, with its groups: refused (ErrApproverRefused)
// when the row's gate lets neither who's name nor any of its groups
// approve. Events action.approved and action.approval_added carry "groups"
// when who has any.
func ApproveAs(runID, actionID string, args json.RawMessage, who Approver) Op {
	return Op{body: &approveOp{at: at{runID, actionID}, args: args, by: who.By,
		groups: slices.Clone(who.Groups), big: bigOf(args)}}
}

// Reject marks a not-yet-claimed row rejected (Error holds the reason). Event
// action.rejected {"reason","by"}. Identical repeat: success.
func Reject(runID, actionID, reason, by string) Op {
	return Op{body: &rejectOp{at: at{runID, actionID}, reason: reason, by: by}}
}

// Edit replaces a not-yet-claimed row's planned args (clears any approval,
// status back to pending). Event action.edited {"args","by"} (args of 64 KiB
// or more are not inlined: {"args_truncated":true,"by"}). Editing to the
// same args changes nothing (success).
func Edit(runID, actionID string, args json.RawMessage, by string) Op {
	return Op{body: &editOp{at: at{runID, actionID}, args: args, by: by, big: bigOf(args)}}
}

// ShowResolved is docket's own Edit: it writes a not-yet-claimed row's args
// with its references resolved, so that a reviewer approves what will be
// sent. The row changes as with Edit (approvals cleared, back to pending);
// the event is action.args_resolved {"args"}, so no person appears to have
// changed the action.
func ShowResolved(runID, actionID string, args json.RawMessage) Op {
	return Op{body: &editOp{at: at{runID, actionID}, args: args, big: bigOf(args), resolved: true}}
}

// Skip marks a not-yet-claimed row skipped (e.g. a dependent of a rejected or
// failed action when the run ends): the row must be pending or approved; if it
// has a key (a retryable failure left it pending) the key record is skipped
// too. Event action.skipped {"reason"}. Identical repeat: success.
func Skip(runID, actionID, reason string) Op {
	return Op{body: &skipOp{at: at{runID, actionID}, reason: reason}}
}

// Compensated marks a succeeded row (and its key record) compensated (its
// "<id>.undo" succeeded). Event action.compensated. Identical repeat: success.
func Compensated(runID, actionID string) Op {
	return Op{body: &compensatedOp{at: at{runID, actionID}}}
}

// AddUndo appends a compensating row "<id>.undo" (status pending, Undo true)
// to the run if it is not there yet (identical repeat: success; the same id
// with another tool or args: *ConflictError). No event: the row's own claim
// and outcome events follow.
func AddUndo(runID string, row Action) Op {
	return Op{body: &addUndoOp{runID: runID, row: row, big: bigOf(row.Args)}}
}

// SetRunStatus moves a run to status with an event of type eventType (e.g.
// "run.paused", "run.completed") carrying data; errMsg is stored in Run.Error.
// If the run already has that status and eventType is "", nothing is written.
func SetRunStatus(runID string, status RunStatus, eventType EventType, errMsg string, data json.RawMessage) Op {
	return Op{body: &setRunStatusOp{runID: runID, status: status, eventType: eventType, errMsg: errMsg, data: data}}
}

// Note appends an event without a state change (e.g. "run.awaiting_approval",
// EventLookupWait for a lookup that waits before an attempt).
func Note(runID string, eventType EventType, actionID string, data json.RawMessage) Op {
	return Op{body: &noteOp{runID: runID, eventType: eventType, actionID: actionID, data: data}}
}

// conflict is the Result of an op of kind refused by the state it found.
func (b *batch) conflict(kind opKind, runID, actionID, key string, cur KeyRecord, row *storedRow, format string, args ...any) Result {
	res := Result{Err: &ConflictError{RunID: runID, ActionID: actionID, Key: key, Op: opNames[kind],
		Current: cur, Msg: fmt.Sprintf(format, args...)}, Key: cur}
	if row != nil {
		res.Action = b.rowAction(runID, *row, cur)
	}
	return res
}

// rowAction is a row as Action, with the output of its key record.
func (b *batch) rowAction(runID string, r storedRow, rec KeyRecord) Action {
	a := r.action(runID)
	if r.Key != "" && rec.Key == r.Key && (rec.State == StatusSucceeded || rec.State == StatusCompensated) {
		a.Output = rec.Output
	}
	return a
}

func validJSON(what string, v json.RawMessage, required bool) error {
	if len(v) == 0 {
		if required {
			return fmt.Errorf("%w: %s is required", ErrInvalid, what)
		}
		return nil
	}
	if !json.Valid(v) {
		return fmt.Errorf("%w: %s is not valid JSON", ErrInvalid, what)
	}
	return nil
}

func jsonEqual(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// obj builds a JSON object from alternating keys and values (values marshaled
// with encoding/json, json.RawMessage kept as is).
func obj(kv ...any) json.RawMessage {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(kv[i].(string))
		buf.Write(k)
		buf.WriteByte(':')
		switch v := kv[i+1].(type) {
		case json.RawMessage:
			buf.Write(v)
		default:
			b, err := json.Marshal(v)
			if err != nil {
				b = []byte("null")
			}
			buf.Write(b)
		}
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// outputData is the event data for an output: inline up to 64 KiB.
func outputData(out json.RawMessage, kv ...any) json.RawMessage {
	if len(out) > eventInlineMax {
		return obj(append(kv, "output_truncated", true)...)
	}
	return obj(append(kv, "output", out)...)
}

// argsData is the event data for args: inline below 64 KiB, like outputs.
func argsData(args json.RawMessage, kv ...any) json.RawMessage {
	if len(args) > eventInlineMax {
		return obj(append([]any{"args_truncated", true}, kv...)...)
	}
	return obj(append([]any{"args", args}, kv...)...)
}

// evalOp evaluates one op; its result carries values, never references to
// blobs (large.go).
func (b *batch) evalOp(o Op) (Result, error) {
	if err := o.misuse.err(); err != nil {
		return errResult(err), nil
	}
	if o.body == nil {
		return errResult(fmt.Errorf("%w: unknown op", ErrInvalid)), nil
	}
	res, err := o.body.eval(*b)
	if err != nil {
		return res, err
	}
	runID, big := o.body.scope()
	if err := b.resolveResult(runID, big, &res); err != nil {
		return Result{}, err
	}
	return res, nil
}

// touch rewrites the run header with a new UpdatedAt. Ops that only append
// events do not rewrite the header: readers take the later of the header's
// UpdatedAt and the run's last event (see readRun).
func (b *batch) touch(run storedRun) error {
	run.UpdatedAt = b.now()
	return b.putRun(run)
}

// runRow loads a run and a row of its current revision.
func (b *batch) runRow(w at) (storedRun, storedRow, error) {
	if err := validID("run id", w.runID); err != nil {
		return storedRun{}, storedRow{}, err
	}
	if err := validID("action id", w.actionID); err != nil {
		return storedRun{}, storedRow{}, err
	}
	run, ok, err := b.run(w.runID)
	if err != nil {
		return run, storedRow{}, err
	}
	if !ok {
		return run, storedRow{}, fmt.Errorf("%w: run %q", ErrNotFound, w.runID)
	}
	row, ok, err := b.row(w.runID, run.Revision, w.actionID)
	if err != nil {
		return run, row, err
	}
	if !ok {
		return run, row, fmt.Errorf("%w: action %q in run %q (revision %d)", ErrNotFound, w.actionID, w.runID, run.Revision)
	}
	return run, row, nil
}

// isHard tells read/encode failures (abort the request) from op-level errors.
func isHard(err error) bool {
	return err != nil && !isOpLevel(err)
}

func isOpLevel(err error) bool {
	for _, e := range []error{ErrNotFound, ErrInvalid, ErrTooLarge, ErrConflict, ErrPlanMismatch, ErrApproverRefused, ErrBudgetExceeded, ErrStale} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// opFailure turns an error met while evaluating an op into its outcome: a hard
// error (storage) fails the whole commit, any other fails only this op.
func opFailure(err error) (Result, error) {
	if isHard(err) {
		return Result{}, err
	}
	return errResult(err), nil
}

// errResult builds an op-level error Result (nothing written by the op).
func errResult(err error) Result { return Result{Err: err} }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
