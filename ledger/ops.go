package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
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
)

var opNames = [...]string{"none", "claim", "succeed", "fail", "needs_review", "resolve", "approve",
	"reject", "edit", "skip", "compensated", "add_undo", "set_run_status", "note", "create_run",
	"add_revision", "memo", "set_tools_hash", "set_pause", "decide"}

// Op is one conditional change to the ledger; build it with the constructors
// below. Apply commits ops atomically per call (all in one transaction, shared
// with other callers' ops by group commit) and durably before returning.
type Op struct {
	kind                 opKind
	runID, actionID, key string
	tool, msg, by        string
	groups               []string // Approve: the approver's groups
	eventType            EventType
	args, output, data   json.RawMessage
	n                    int
	retryable            bool
	failure              Failure
	res                  Resolution
	row                  Action
	status               RunStatus
	run                  Run
	planJSON             []byte
	planRefs             map[string]string // action index -> blob name of large args in planJSON
	planHash             string
	rows                 []Action
	big                  *bigValue                  // args (or row.Args) when large, named by the caller (large.go)
	blobs                map[string]json.RawMessage // a revision's large values by blob name
	gate                 *Gate                      // Decide
	charges              []Charge                   // Claim: budgets (budget.go)
	basis                *basis                     // Claim: what its caller decided from (admit.go)
	noEffect             bool                       // Fail, Skip: no attempt took effect (budget.go)
}

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
	return Op{kind: opClaim, runID: runID, actionID: actionID, tool: tool, key: key, args: args, n: n, big: bigOf(args)}
}

// Succeed records output for attempt n: the key must be claimed with Attempt n
// (by any owner: a lookup may find the effect of a dead owner's claim).
// Row -> succeeded; event action.succeeded {"output"} (or {"output_truncated":true}
// above 64 KiB). Identical repeat: success. ErrTooLarge above MaxOutputBytes;
// ErrNotFound for an unknown key; ErrInvalid for output that is not JSON.
func Succeed(key string, n int, output json.RawMessage) Op {
	return Op{kind: opSucceed, key: key, n: n, output: output}
}

// Fail records a failed attempt n (key claimed with Attempt n). retryable: key
// and row back to pending (next claim is n+1), event action.attempt_failed
// {"attempt","error","outcome", plus data}; else failed, event action.failed
// {"attempt","error","outcome", plus data}. data, if given, is a JSON object
// whose fields are merged in; "outcome" defaults to "retryable" / "failed".
// Identical repeat: success.
func Fail(key string, n int, msg string, retryable bool, data json.RawMessage) Op {
	return Op{kind: opFail, key: key, n: n, msg: msg, retryable: retryable, data: data}
}

// FailWith is Fail with the failure's class, recorded on the key record
// (KeyRecord.Failure; unknown and key_in_flight set MaybeTookEffect) and, unless
// data says otherwise, as the event's "outcome".
func FailWith(key string, n int, msg string, retryable bool, class Failure, data json.RawMessage) Op {
	return Op{kind: opFail, key: key, n: n, msg: msg, retryable: retryable, failure: class, data: data}
}

// NeedsReview parks attempt n (key claimed with Attempt n) for a person:
// row and key -> needs_review (Error holds the reason), event
// action.needs_review {"attempt","reason"}. Identical repeat: success.
func NeedsReview(key string, n int, reason string) Op {
	return Op{kind: opNeedsReview, key: key, n: n, msg: reason}
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
	return Op{kind: opResolve, runID: runID, actionID: actionID, res: r}
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
	return Op{kind: opApprove, runID: runID, actionID: actionID, args: args, by: who.By,
		groups: slices.Clone(who.Groups), big: bigOf(args)}
}

// Reject marks a not-yet-claimed row rejected (Error holds the reason). Event
// action.rejected {"reason","by"}. Identical repeat: success.
func Reject(runID, actionID, reason, by string) Op {
	return Op{kind: opReject, runID: runID, actionID: actionID, msg: reason, by: by}
}

// Edit replaces a not-yet-claimed row's planned args (clears any approval,
// status back to pending). Event action.edited {"args","by"} (args of 64 KiB
// or more are not inlined: {"args_truncated":true,"by"}). Editing to the
// same args changes nothing (success).
func Edit(runID, actionID string, args json.RawMessage, by string) Op {
	return Op{kind: opEdit, runID: runID, actionID: actionID, args: args, by: by, big: bigOf(args)}
}

// ShowResolved is docket's own Edit: it writes a not-yet-claimed row's args
// with its references resolved, so that a reviewer approves what will be
// sent. The row changes as with Edit (approvals cleared, back to pending);
// the event is action.args_resolved {"args"}, so no person appears to have
// changed the action.
func ShowResolved(runID, actionID string, args json.RawMessage) Op {
	return Op{kind: opEdit, runID: runID, actionID: actionID, args: args, big: bigOf(args), eventType: EventActionArgsResolved}
}

// Skip marks a not-yet-claimed row skipped (e.g. a dependent of a rejected or
// failed action when the run ends): the row must be pending or approved; if it
// has a key (a retryable failure left it pending) the key record is skipped
// too. Event action.skipped {"reason"}. Identical repeat: success.
func Skip(runID, actionID, reason string) Op {
	return Op{kind: opSkip, runID: runID, actionID: actionID, msg: reason}
}

// Compensated marks a succeeded row (and its key record) compensated (its
// "<id>.undo" succeeded). Event action.compensated. Identical repeat: success.
func Compensated(runID, actionID string) Op {
	return Op{kind: opCompensated, runID: runID, actionID: actionID}
}

// AddUndo appends a compensating row "<id>.undo" (status pending, Undo true)
// to the run if it is not there yet (identical repeat: success; the same id
// with another tool or args: *ConflictError). No event: the row's own claim
// and outcome events follow.
func AddUndo(runID string, row Action) Op {
	return Op{kind: opAddUndo, runID: runID, row: row, big: bigOf(row.Args)}
}

// SetRunStatus moves a run to status with an event of type eventType (e.g.
// "run.paused", "run.completed") carrying data; errMsg is stored in Run.Error.
// If the run already has that status and eventType is "", nothing is written.
func SetRunStatus(runID string, status RunStatus, eventType EventType, errMsg string, data json.RawMessage) Op {
	return Op{kind: opSetRunStatus, runID: runID, status: status, eventType: eventType, msg: errMsg, data: data}
}

// Note appends an event without a state change (e.g. "run.awaiting_approval",
// EventLookupWait for a lookup that waits before an attempt).
func Note(runID string, eventType EventType, actionID string, data json.RawMessage) Op {
	return Op{kind: opNote, runID: runID, eventType: eventType, actionID: actionID, data: data}
}

// opFail builds an op-level error Result (nothing written by the op).
func errResult(err error) Result { return Result{Err: err} }

func (b *batch) conflict(o Op, runID, actionID, key string, cur KeyRecord, row *storedRow, format string, args ...any) Result {
	res := Result{Err: &ConflictError{RunID: runID, ActionID: actionID, Key: key, Op: opNames[o.kind],
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

// evalOp evaluates one op; its result carries values, never references to
// blobs (large.go).
// argsData is the event data for args: inline below 64 KiB, like outputs.
func argsData(args json.RawMessage, kv ...any) json.RawMessage {
	if len(args) > eventInlineMax {
		return obj(append([]any{"args_truncated", true}, kv...)...)
	}
	return obj(append([]any{"args", args}, kv...)...)
}

func (b *batch) evalOp(o Op) (Result, error) {
	res, err := b.evalOpRefs(o)
	if err != nil {
		return res, err
	}
	if err := b.resolveResult(o, &res); err != nil {
		return Result{}, err
	}
	return res, nil
}

func (b *batch) evalOpRefs(o Op) (Result, error) {
	if o.basis != nil && o.kind != opClaim {
		return errResult(fmt.Errorf("%w: only a claim says what it was decided from", ErrInvalid)), nil
	}
	if o.charges != nil && o.kind != opClaim {
		return errResult(fmt.Errorf("%w: only a claim carries budget charges", ErrInvalid)), nil
	}
	if o.noEffect && o.kind != opFail && o.kind != opSkip {
		return errResult(fmt.Errorf("%w: only a failure or a skip says no attempt took effect", ErrInvalid)), nil
	}
	switch o.kind {
	case opClaim:
		return b.claim(o)
	case opSucceed, opFail, opNeedsReview:
		return b.outcome(o)
	case opResolve:
		return b.resolve(o)
	case opApprove, opReject, opEdit, opSkip, opCompensated:
		return b.review(o)
	case opAddUndo:
		return b.addUndo(o)
	case opSetRunStatus, opNote:
		return b.runEvent(o)
	case opCreateRun:
		return b.createRun(o)
	case opAddRevision:
		return b.addRevision(o)
	case opMemo:
		return b.memo(o)
	case opSetToolsHash:
		return b.setToolsHash(o)
	case opSetPause:
		return b.setPause(o)
	case opDecide:
		return b.decide(o)
	}
	return errResult(fmt.Errorf("%w: unknown op", ErrInvalid)), nil
}

// touch rewrites the run header with a new UpdatedAt. Ops that only append
// events do not rewrite the header: readers take the later of the header's
// UpdatedAt and the run's last event (see readRun).
func (b *batch) touch(run storedRun) error {
	run.UpdatedAt = b.now()
	return b.putRun(run)
}

// runRow loads a run and a row of its current revision.
func (b *batch) runRow(o Op) (storedRun, storedRow, error) {
	if err := validID("run id", o.runID); err != nil {
		return storedRun{}, storedRow{}, err
	}
	if err := validID("action id", o.actionID); err != nil {
		return storedRun{}, storedRow{}, err
	}
	run, ok, err := b.run(o.runID)
	if err != nil {
		return run, storedRow{}, err
	}
	if !ok {
		return run, storedRow{}, fmt.Errorf("%w: run %q", ErrNotFound, o.runID)
	}
	row, ok, err := b.row(o.runID, run.Revision, o.actionID)
	if err != nil {
		return run, row, err
	}
	if !ok {
		return run, row, fmt.Errorf("%w: action %q in run %q (revision %d)", ErrNotFound, o.actionID, o.runID, run.Revision)
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

func (b *batch) claim(o Op) (Result, error) {
	if err := validID("key", o.key); err != nil {
		return errResult(err), nil
	}
	if o.n < 1 {
		return errResult(fmt.Errorf("%w: claim attempt %d (attempts start at 1)", ErrInvalid, o.n)), nil
	}
	if err := validJSON("args", o.args, false); err != nil {
		return errResult(err), nil
	}
	if err := checkCharges(o.charges); err != nil {
		return errResult(err), nil
	}
	run, row, err := b.runRow(o)
	if err != nil {
		return opFailure(err)
	}
	owner, has, err := b.keyRun(o.key)
	if err != nil {
		return Result{}, err
	}
	var rec KeyRecord
	if has {
		if owner != o.runID {
			return b.conflict(o, o.runID, o.actionID, o.key, KeyRecord{}, &row, "key belongs to run %q", owner), nil
		}
		if rec, _, err = b.keyRec(o.runID, o.key); err != nil {
			return Result{}, err
		}
		if rec.ActionID != o.actionID {
			return b.conflict(o, o.runID, o.actionID, o.key, rec, &row, "key belongs to action %q", rec.ActionID), nil
		}
	}
	switch row.Status {
	case StatusRejected, StatusSkipped, StatusCompensated:
		if !has || row.Key == o.key {
			return b.conflict(o, o.runID, o.actionID, o.key, rec, &row, "action is %s", row.Status), nil
		}
	}
	if row.Key != "" && row.Key != o.key {
		old, _, err := b.keyRec(o.runID, row.Key)
		if err != nil {
			return Result{}, err
		}
		if old.State == StatusClaimed {
			return b.conflict(o, o.runID, o.actionID, row.Key, old, &row, "action is claimed under another key"), nil
		}
	}
	if has {
		switch {
		case rec.State == StatusPending && rec.Attempt == o.n-1:
		case rec.State == StatusClaimed && rec.Attempt == o.n-1 && rec.Owner != b.tx.Incarnation():
			gone, err := b.ownerGone(rec.Owner)
			if err != nil {
				return Result{}, err
			}
			if !gone {
				return b.conflict(o, o.runID, o.actionID, o.key, rec, &row, "claim in flight on another node (its lease is live)"), nil
			}
		case rec.State == StatusClaimed && rec.Owner == b.tx.Incarnation():
			return b.conflict(o, o.runID, o.actionID, o.key, rec, &row, "claim in flight in this process"), nil
		case rec.State == StatusPending || rec.State == StatusClaimed:
			return b.conflict(o, o.runID, o.actionID, o.key, rec, &row, "attempt %d does not follow %d", o.n, rec.Attempt), nil
		default:
			// The key has an outcome: link the current row to it (replay).
			if row.Key != o.key || row.Status != rec.State {
				row.Key, row.Status, row.Attempts, row.Error = o.key, rec.State, rec.Attempt, rec.Error
				row.Args = rec.Args
				if err := b.putRow(o.runID, run.Revision, row); err != nil {
					return Result{}, err
				}
				if err := b.touch(run); err != nil {
					return Result{}, err
				}
			}
			return b.conflict(o, o.runID, o.actionID, o.key, rec, &row, "key is %s", rec.State), nil
		}
	} else if o.n != 1 {
		return b.conflict(o, o.runID, o.actionID, o.key, rec, &row, "key has no record: the first claim is attempt 1, not %d", o.n), nil
	}
	takeover := has && rec.State == StatusClaimed // a gone owner's claim, concluded: nothing new starts
	if !takeover {
		if refused, err := b.admit(o, run, row, !has); err != nil {
			return Result{}, err
		} else if refused != nil {
			res := errResult(refused)
			res.Action, res.Key = b.rowAction(o.runID, row, rec), rec
			return res, nil
		}
	}
	var reserved []any
	if !has {
		// The key's first claim reserves its budgets (exactly once per key).
		var refused error
		if reserved, refused, err = b.reserve(o); err != nil {
			return Result{}, err
		} else if refused != nil {
			res := errResult(refused)
			res.Action = b.rowAction(o.runID, row, KeyRecord{})
			return res, nil
		}
	} else {
		// A retry of a key whose hold an attempt that did not happen gave
		// back takes it again: a reservation like the first, checked
		// against the limits.
		var refused error
		if reserved, refused, err = b.rereserve(o); err != nil {
			return Result{}, err
		} else if refused != nil {
			res := errResult(refused)
			res.Action, res.Key = b.rowAction(o.runID, row, rec), rec
			return res, nil
		}
	}
	now := b.now()
	args, err := b.stash(o.runID, o.args, o.big) // one blob for the key record and the row
	if err != nil {
		return Result{}, err
	}
	rec = claimed(rec, has, KeyRecord{Key: o.key, RunID: o.runID, ActionID: o.actionID, Tool: o.tool, Args: args,
		State: StatusClaimed, Attempt: o.n, Owner: b.tx.Incarnation(), ClaimedAt: now, UpdatedAt: now})
	if err := b.putKeyRec(rec, !has); err != nil {
		return Result{}, err
	}
	row.Key, row.Status, row.Attempts, row.Error = o.key, StatusClaimed, o.n, ""
	if len(o.args) > 0 {
		row.Args = args
	}
	claimData := obj("attempt", o.n, "key", o.key)
	if used := useApprovals(&row, o.tool, o.key, o.args, now); len(used) > 0 || row.Gate != nil {
		// Who approved, and under which rule: an approval is used by this
		// claim only.
		kv := []any{"attempt", o.n, "key", o.key, "approved_by", used}
		if row.Gate != nil {
			kv = append(kv, "rule", row.Gate.Rule, "outcome", row.Gate.Outcome)
		}
		claimData = obj(kv...)
	}
	if len(reserved) > 0 {
		claimData = withField(claimData, "budgets", reserved)
	}
	if err := b.putRow(o.runID, run.Revision, row); err != nil {
		return Result{}, err
	}
	if err := b.event(o.runID, EventActionClaimed, o.actionID, claimData); err != nil {
		return Result{}, err
	}
	return Result{Action: row.action(o.runID), Key: rec}, nil
}

// claimed carries the safety facts of prev (the key's record, if has) over
// to next, the record of a new claim: FirstClaimedAt is set by attempt 1
// and kept; MaybeTookEffect is kept, and set when the claim takes over a
// claim that has no outcome.
func claimed(prev KeyRecord, has bool, next KeyRecord) KeyRecord {
	if !has || next.Attempt == 1 {
		next.FirstClaimedAt = next.ClaimedAt
	} else {
		next.FirstClaimedAt = prev.FirstClaimedAt // zero on records from before the field
	}
	next.MaybeTookEffect = has && (prev.MaybeTookEffect || prev.State == StatusClaimed)
	return next
}

// outcome handles Succeed, Fail and NeedsReview.
func (b *batch) outcome(o Op) (Result, error) {
	if err := validID("key", o.key); err != nil {
		return errResult(err), nil
	}
	if o.kind == opSucceed {
		if len(o.output) > b.tx.MaxOutputBytes() {
			return errResult(fmt.Errorf("%w: output of %d bytes exceeds %d", ErrTooLarge, len(o.output), b.tx.MaxOutputBytes())), nil
		}
		if err := validJSON("output", o.output, true); err != nil {
			return errResult(err), nil
		}
	}
	var extra map[string]json.RawMessage
	if o.kind == opFail && len(o.data) > 0 {
		if err := json.Unmarshal(o.data, &extra); err != nil {
			return errResult(fmt.Errorf("%w: fail data must be a JSON object", ErrInvalid)), nil
		}
	}
	runID, has, err := b.keyRun(o.key)
	if err != nil {
		return Result{}, err
	}
	if !has {
		return errResult(fmt.Errorf("%w: key %s has no record", ErrNotFound, o.key)), nil
	}
	rec, _, err := b.keyRec(runID, o.key)
	if err != nil {
		return Result{}, err
	}
	run, _, err := b.run(runID)
	if err != nil {
		return Result{}, err
	}
	row, rowOK, err := b.row(runID, run.Revision, rec.ActionID)
	if err != nil {
		return Result{}, err
	}
	linked := rowOK && row.Key == o.key
	var rowp *storedRow
	if rowOK {
		rowp = &row
	}
	// The state this op leads to, for the identical-repeat check.
	var want Status
	switch {
	case o.kind == opSucceed:
		want = StatusSucceeded
	case o.kind == opNeedsReview:
		want = StatusNeedsReview
	case o.retryable:
		want = StatusPending
	default:
		want = StatusFailed
	}
	if rec.State == want && rec.Attempt == o.n {
		same := false
		switch o.kind {
		case opSucceed:
			same = jsonEqual(rec.Output, o.output)
		case opFail:
			same = rec.Error == o.msg && rec.Retryable == o.retryable
		case opNeedsReview:
			same = rec.Error == o.msg
		}
		if same {
			res := Result{Key: rec}
			if rowOK {
				res.Action = b.rowAction(runID, row, rec)
			}
			return res, nil
		}
	}
	if rec.State != StatusClaimed || rec.Attempt != o.n {
		return b.conflict(o, runID, rec.ActionID, o.key, rec, rowp, "attempt %d is not claimed", o.n), nil
	}
	if o.kind == opNeedsReview && rec.Owner != b.tx.Incarnation() {
		// "Outcome unknown" is only true of a claim whose process is gone:
		// on a shared ledger another live node may still be calling the tool
		// (and will record what it did).
		gone, err := b.ownerGone(rec.Owner)
		if err != nil {
			return Result{}, err
		}
		if !gone {
			return b.conflict(o, runID, rec.ActionID, o.key, rec, rowp, "claim in flight on another node (its lease is live)"), nil
		}
	}
	rec.State, rec.UpdatedAt = want, b.now()
	rec.Output, rec.Error, rec.Retryable, rec.Failure = nil, "", false, ""
	var evType EventType
	var data json.RawMessage
	switch o.kind {
	case opSucceed:
		rec.Output = o.output
		evType, data = EventActionSucceeded, outputData(o.output)
	case opNeedsReview:
		rec.Error = o.msg
		rec.MaybeTookEffect = true
		evType, data = EventActionNeedsReview, obj("attempt", o.n, "reason", o.msg)
	case opFail:
		rec.Error, rec.Retryable, rec.Failure = o.msg, o.retryable, o.failure
		if o.retryable && o.failure.mayHaveTakenEffect() {
			rec.MaybeTookEffect = true
		}
		evType = EventActionFailed
		outcome := "failed"
		if o.retryable {
			evType, outcome = EventActionAttemptFailed, "retryable"
		}
		if extra == nil {
			extra = map[string]json.RawMessage{}
		}
		extra["attempt"], _ = json.Marshal(o.n)
		extra["error"], _ = json.Marshal(o.msg)
		if _, ok := extra["outcome"]; !ok {
			extra["outcome"], _ = json.Marshal(cmpOr(string(o.failure), outcome))
		}
		if data, err = json.Marshal(extra); err != nil {
			return Result{}, err
		}
	}
	definite := o.failure != FailureUnknown && o.failure != FailureKeyInFlight && (want == StatusFailed || !o.failure.mayHaveTakenEffect())
	if (want == StatusFailed || want == StatusPending) && definite && (!rec.MaybeTookEffect || o.noEffect) {
		// A definite failure: nothing happened, the budgets get it back
		// (a retry takes it again with its claim).
		if data, err = b.release(o.key, data); err != nil {
			return Result{}, err
		}
	}
	if err := b.putKeyRec(rec, false); err != nil {
		return Result{}, err
	}
	if linked {
		row.Status, row.Error, row.Attempts = want, rec.Error, rec.Attempt
		if err := b.putRow(runID, run.Revision, row); err != nil {
			return Result{}, err
		}
	}
	if err := b.event(runID, evType, rec.ActionID, data); err != nil {
		return Result{}, err
	}
	res := Result{Key: rec}
	if rowOK {
		res.Action = b.rowAction(runID, row, rec)
	}
	return res, nil
}

func (b *batch) resolve(o Op) (Result, error) {
	r := o.res
	n := 0
	if r.Done != nil {
		n++
	}
	if r.Retry {
		n++
	}
	if r.Skip {
		n++
	}
	if n != 1 {
		return errResult(fmt.Errorf("%w: a resolution is exactly one of done, retry, skip", ErrInvalid)), nil
	}
	if r.Done != nil {
		if len(r.Done) > b.tx.MaxOutputBytes() {
			return errResult(fmt.Errorf("%w: output of %d bytes exceeds %d", ErrTooLarge, len(r.Done), b.tx.MaxOutputBytes())), nil
		}
		if err := validJSON("output", r.Done, true); err != nil {
			return errResult(err), nil
		}
	}
	run, row, err := b.runRow(o)
	if err != nil {
		return opFailure(err)
	}
	if row.Key == "" {
		return b.conflict(o, o.runID, o.actionID, "", KeyRecord{}, &row, "action was never claimed (status %s)", row.Status), nil
	}
	rec, _, err := b.keyRec(o.runID, row.Key)
	if err != nil {
		return Result{}, err
	}
	var want Status
	var resolution string
	switch {
	case r.Done != nil:
		want, resolution = StatusSucceeded, "done"
	case r.Retry:
		want, resolution = StatusPending, "retry"
	default:
		want, resolution = StatusSkipped, "skip"
	}
	if rec.State != StatusNeedsReview {
		if rec.State == want && (r.Done == nil || jsonEqual(rec.Output, r.Done)) {
			return Result{Action: b.rowAction(o.runID, row, rec), Key: rec}, nil // identical repeat
		}
		return b.conflict(o, o.runID, o.actionID, row.Key, rec, &row, "action is not in needs_review"), nil
	}
	rec.State, rec.UpdatedAt, rec.Retryable = want, b.now(), false
	rec.MaybeTookEffect, rec.Failure = false, "" // a person looked and decided
	data := obj("resolution", resolution, "by", r.By)
	switch {
	case r.Done != nil:
		rec.Output, rec.Error = r.Done, ""
		data = outputData(r.Done, "resolution", resolution, "by", r.By)
	case r.Retry:
		rec.Retryable = true
		row.ApprovedArgs = rec.Args
	default:
		// Skip: the person says it did not take effect, and nothing will
		// try again: the budgets get it back. (Retry keeps the hold for the
		// attempt the person asked for; done keeps it: it took effect.)
		if data, err = b.release(row.Key, data); err != nil {
			return Result{}, err
		}
	}
	if err := b.putKeyRec(rec, false); err != nil {
		return Result{}, err
	}
	row.Status, row.Error = want, rec.Error
	if err := b.putRow(o.runID, run.Revision, row); err != nil {
		return Result{}, err
	}
	if err := b.event(o.runID, EventActionResolved, o.actionID, data); err != nil {
		return Result{}, err
	}
	if r.Skip {
		if err := b.event(o.runID, EventActionSkipped, o.actionID, obj("reason", "resolved by "+r.By)); err != nil {
			return Result{}, err
		}
	}
	return Result{Action: b.rowAction(o.runID, row, rec), Key: rec}, nil
}

// review handles Approve, Reject, Edit, Skip and Compensated: row-level marks.
func (b *batch) review(o Op) (Result, error) {
	if o.kind == opEdit {
		if err := validJSON("args", o.args, true); err != nil {
			return errResult(err), nil
		}
	}
	if o.kind == opApprove {
		if err := validJSON("args", o.args, false); err != nil {
			return errResult(err), nil
		}
	}
	run, row, err := b.runRow(o)
	if err != nil {
		return opFailure(err)
	}
	var rec KeyRecord
	if row.Key != "" {
		if rec, _, err = b.keyRec(o.runID, row.Key); err != nil {
			return Result{}, err
		}
	}
	unclaimed := row.Key == "" && (row.Status == StatusPending || row.Status == StatusApproved)
	done := func() (Result, error) { return Result{Action: b.rowAction(o.runID, row, rec), Key: rec}, nil }
	refuse := func() (Result, error) {
		return b.conflict(o, o.runID, o.actionID, row.Key, rec, &row, "action is %s", row.Status), nil
	}
	var evType EventType
	var data json.RawMessage
	recChanged := false
	switch o.kind {
	case opApprove:
		args := o.args
		if args == nil {
			args = row.Args
		}
		if row.Status == StatusApproved && row.Key == "" {
			same, err := b.sameArgs(o.runID, row.ApprovedArgs, args, o.big)
			if err != nil {
				return Result{}, err
			}
			if same && row.Gate != nil {
				// Approved, unless its approvals expired since.
				cur := row.action(o.runID)
				plain, err := b.blob(o.runID, args)
				if err != nil {
					return Result{}, err
				}
				cur.ApprovedArgs = plain
				same = row.Gate.Need == 0 || len(cur.Approvers(plain, b.now())) >= row.Gate.Need
			}
			if same {
				return done()
			}
		}
		if !unclaimed {
			return refuse()
		}
		if ok, why := row.Gate.MayApprove(o.by, o.groups, run.CreatedBy); !ok {
			return errResult(fmt.Errorf("%w: %s", ErrApproverRefused, why)), nil
		}
		plain, err := b.blob(o.runID, args)
		if err != nil {
			return Result{}, err
		}
		cur := row.action(o.runID)
		if cur.ApprovedArgs, err = b.blob(o.runID, row.ApprovedArgs); err != nil {
			return Result{}, err
		}
		now := b.now()
		if slices.Contains(cur.Approvers(plain, now), o.by) && row.Gate != nil {
			return done() // this person's approval of these args is recorded
		}
		ap := Approval{By: o.by, Groups: o.groups, At: now, Args: ArgsHash(row.Tool, plain)}
		if row.Gate != nil && row.Gate.TTL > 0 {
			ap.Expires = now.Add(row.Gate.TTL)
		}
		cur.Approvals = append(slices.Clone(row.Approvals), ap)
		row.Approvals = cur.Approvals
		have, need := len(cur.Approvers(plain, now)), cur.Needed()
		if have < need {
			evType, data = EventActionApprovalAdded, approvedData(o, have, need)
			break
		}
		if args, err = b.stash(o.runID, args, o.big); err != nil {
			return Result{}, err
		}
		row.Status, row.ApprovedArgs = StatusApproved, args
		evType, data = EventActionApproved, obj("by", o.by)
		if row.Gate != nil {
			data = approvedData(o, have, need)
		}
	case opReject:
		if row.Status == StatusRejected {
			return done()
		}
		if !unclaimed {
			return refuse()
		}
		row.Status, row.Error, row.ApprovedArgs = StatusRejected, o.msg, nil
		evType, data = EventActionRejected, obj("reason", o.msg, "by", o.by)
	case opEdit:
		if unclaimed {
			same, err := b.sameArgs(o.runID, row.Args, o.args, o.big)
			if err != nil {
				return Result{}, err
			}
			if same {
				return done()
			}
		}
		if !unclaimed {
			return refuse()
		}
		args, err := b.stash(o.runID, o.args, o.big)
		if err != nil {
			return Result{}, err
		}
		row.Status, row.Args, row.ApprovedArgs, row.Approvals = StatusPending, args, nil, nil
		evType, data = EventActionEdited, argsData(o.args, "by", o.by)
		if o.eventType == EventActionArgsResolved {
			evType, data = EventActionArgsResolved, argsData(o.args)
		}
	case opSkip:
		if row.Status == StatusSkipped {
			return done()
		}
		retryPending := row.Key != "" && row.Status == StatusPending && rec.State == StatusPending
		if !unclaimed && !retryPending {
			return refuse()
		}
		row.Status = StatusSkipped
		evType, data = EventActionSkipped, obj("reason", o.msg)
		if retryPending {
			rec.State, rec.UpdatedAt, recChanged = StatusSkipped, b.now(), true
			if !rec.MaybeTookEffect || o.noEffect {
				// No attempt took effect: the budgets get it back.
				if data, err = b.release(rec.Key, data); err != nil {
					return Result{}, err
				}
			}
		}
	case opCompensated:
		if row.Status == StatusCompensated {
			return done()
		}
		if row.Status != StatusSucceeded {
			return refuse()
		}
		row.Status = StatusCompensated
		if row.Key != "" && rec.State == StatusSucceeded {
			rec.State, rec.UpdatedAt, recChanged = StatusCompensated, b.now(), true
		}
		evType = EventActionCompensated
	}
	if recChanged {
		if err := b.putKeyRec(rec, false); err != nil {
			return Result{}, err
		}
	}
	if err := b.putRow(o.runID, run.Revision, row); err != nil {
		return Result{}, err
	}
	if err := b.event(o.runID, evType, o.actionID, data); err != nil {
		return Result{}, err
	}
	return done()
}

func (b *batch) addUndo(o Op) (Result, error) {
	a := o.row
	if err := validID("run id", o.runID); err != nil {
		return errResult(err), nil
	}
	if err := validID("action id", a.ID); err != nil {
		return errResult(err), nil
	}
	if !strings.HasSuffix(a.ID, ".undo") {
		return errResult(fmt.Errorf("%w: a compensating row's id ends in .undo, not %q", ErrInvalid, a.ID)), nil
	}
	if err := validJSON("args", a.Args, false); err != nil {
		return errResult(err), nil
	}
	run, ok, err := b.run(o.runID)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	row, exists, err := b.row(o.runID, run.Revision, a.ID)
	if err != nil {
		return Result{}, err
	}
	if exists {
		same, err := b.sameArgs(o.runID, row.Args, a.Args, o.big)
		if err != nil {
			return Result{}, err
		}
		if row.Tool == a.Tool && same {
			return Result{Action: row.action(o.runID)}, nil
		}
		return b.conflict(o, o.runID, a.ID, "", KeyRecord{}, &row, "row %q exists with other tool or args", a.ID), nil
	}
	if a.Args, err = b.stash(o.runID, a.Args, o.big); err != nil {
		return Result{}, err
	}
	if a.ApprovedArgs, err = b.stash(o.runID, a.ApprovedArgs, o.big); err != nil {
		return Result{}, err
	}
	row = rowFromAction(a, run.Rows)
	row.Key, row.Status, row.Attempts, row.Error, row.Undo = "", StatusPending, 0, "", true
	run.Rows++
	if err := b.putRow(o.runID, run.Revision, row); err != nil {
		return Result{}, err
	}
	if err := b.touch(run); err != nil {
		return Result{}, err
	}
	return Result{Action: row.action(o.runID)}, nil
}

func (b *batch) runEvent(o Op) (Result, error) {
	if err := validID("run id", o.runID); err != nil {
		return errResult(err), nil
	}
	if err := validJSON("event data", o.data, false); err != nil {
		return errResult(err), nil
	}
	if o.kind == opNote && o.eventType == "" {
		return errResult(fmt.Errorf("%w: a note needs an event type", ErrInvalid)), nil
	}
	if o.kind == opSetRunStatus && !o.status.valid() {
		return errResult(fmt.Errorf("%w: run status %q", ErrInvalid, o.status)), nil
	}
	run, ok, err := b.run(o.runID)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	if o.kind == opSetRunStatus {
		if run.Status == o.status && o.eventType == "" {
			return Result{}, nil
		}
		run.Status, run.Error = o.status, o.msg
		if o.status != RunPaused {
			// A person's pause is over once the run leaves paused: a
			// leftover PausedBy would make a later pause for another
			// reason (an action needs review) read as a person's.
			run.PausedBy = ""
		}
		if err := b.touch(run); err != nil {
			return Result{}, err
		}
	}
	if o.eventType != "" {
		if err := b.event(o.runID, o.eventType, o.actionID, o.data); err != nil {
			return Result{}, err
		}
	}
	return Result{}, nil
}

func checkRows(rows []Action) error {
	seen := make(map[string]bool, len(rows))
	for _, a := range rows {
		if err := validID("action id", a.ID); err != nil {
			return err
		}
		if seen[a.ID] {
			return fmt.Errorf("%w: duplicate action id %q", ErrInvalid, a.ID)
		}
		seen[a.ID] = true
		if a.Status != "" && a.Status != StatusPending && a.Status != StatusApproved {
			return fmt.Errorf("%w: action %q: a new row is pending or approved, not %s", ErrInvalid, a.ID, a.Status)
		}
		if err := validJSON("args of "+a.ID, a.Args, false); err != nil {
			return err
		}
	}
	return nil
}

// putRows writes a revision's rows and their action.approved events.
// putRows records a revision's initial rows as one blob (so that a plan of
// any size is one record: large ones go to the value log); rows that change
// later get their own row records, which take precedence.
func (b *batch) putRows(runID string, rev int, rows []Action) error {
	stored := make([]storedRow, len(rows))
	for i, a := range rows {
		r := rowFromAction(a, i)
		r.Key, r.Attempts, r.Error, r.Undo = "", 0, "", false
		if r.Status == "" {
			r.Status = StatusPending
		}
		if r.Status == StatusApproved && r.ApprovedArgs == nil {
			r.ApprovedArgs = r.Args
		}
		stored[i] = r
	}
	if err := b.tx.PutRows(runID, rev, stored); err != nil {
		return err
	}
	for _, a := range rows {
		if a.Status == StatusApproved {
			if err := b.event(runID, EventActionApproved, a.ID, obj("by", "policy")); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *batch) createRun(o Op) (Result, error) {
	have, ok, err := b.run(o.run.ID)
	if err != nil {
		return Result{}, err
	}
	if ok {
		if have.PlanHash != o.planHash {
			return errResult(fmt.Errorf("%w: run %q was created with plan %s, not %s",
				ErrPlanMismatch, o.run.ID, have.PlanHash, o.planHash)), nil
		}
		return Result{run: have.Run}, nil
	}
	now := b.now()
	r := storedRun{Run: o.run, Rows: len(o.rows)}
	r.Status = RunStatus(cmpOr(string(r.Status), string(RunRunning)))
	r.Revision, r.PlanHash, r.RevHash, r.Error = 1, o.planHash, o.planHash, ""
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.CreatedAt, r.UpdatedAt = r.CreatedAt.UTC(), now
	_, r.Audit = b.tx.(HashedAppender) // its events are chained from the first
	r.AuditHash, r.AuditSeq = "", 0
	if err := b.putRun(r); err != nil {
		return Result{}, err
	}
	if err := b.putBlobs(r.ID, o.blobs); err != nil {
		return Result{}, err
	}
	if err := b.tx.PutPlan(r.ID, 1, o.planJSON, o.planRefs); err != nil {
		return Result{}, err
	}
	created := obj("goal", r.Goal, "policy", r.Policy)
	if r.CreatedBy != "" {
		created = obj("goal", r.Goal, "policy", r.Policy, "created_by", r.CreatedBy)
	}
	if err := b.event(r.ID, EventRunCreated, "", created); err != nil {
		return Result{}, err
	}
	if err := b.event(r.ID, EventPlanRecorded, "", obj("revision", 1, "plan_hash", o.planHash, "actions", len(o.rows))); err != nil {
		return Result{}, err
	}
	if err := b.putRows(r.ID, 1, o.rows); err != nil {
		return Result{}, err
	}
	return Result{run: r.Run, created: true}, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (b *batch) addRevision(o Op) (Result, error) {
	run, ok, err := b.run(o.runID)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	if run.RevHash == "" && run.Revision == 1 {
		run.RevHash = run.PlanHash
	}
	if run.RevHash == o.planHash {
		return Result{rev: run.Revision}, nil // the same plan again: nothing new
	}
	rev := run.Revision + 1
	run.Revision, run.Rows, run.RevHash = rev, len(o.rows), o.planHash
	if err := b.touch(run); err != nil {
		return Result{}, err
	}
	if err := b.putBlobs(o.runID, o.blobs); err != nil {
		return Result{}, err
	}
	if err := b.tx.PutPlan(o.runID, rev, o.planJSON, o.planRefs); err != nil {
		return Result{}, err
	}
	if err := b.event(o.runID, EventRunReplayed, "", obj("revision", rev, "plan_hash", o.planHash, "actions", len(o.rows))); err != nil {
		return Result{}, err
	}
	if err := b.putRows(o.runID, rev, o.rows); err != nil {
		return Result{}, err
	}
	return Result{rev: rev}, nil
}

func (b *batch) memo(o Op) (Result, error) {
	raw, ok, err := b.tx.Memo(o.runID, o.msg)
	if err != nil {
		return Result{}, err
	}
	if ok {
		return Result{memo: raw}, nil
	}
	if err := b.tx.PutMemo(o.runID, o.msg, bytes.Clone(o.data)); err != nil {
		return Result{}, err
	}
	return Result{memo: o.data}, nil
}

// opFailure turns an error met while evaluating an op into its outcome: a hard
// error (storage) fails the whole commit, any other fails only this op.
func opFailure(err error) (Result, error) {
	if isHard(err) {
		return Result{}, err
	}
	return errResult(err), nil
}

// approvedData is the data of action.approved and action.approval_added
// under a gate: who, with its groups when it has any, and the count.
func approvedData(o Op, have, need int) json.RawMessage {
	if len(o.groups) > 0 {
		return obj("by", o.by, "groups", o.groups, "approvals", have, "need", need)
	}
	return obj("by", o.by, "approvals", have, "need", need)
}

// useApprovals marks the row's approvals that count for args (tool's, at
// now) as used by the claim of key, and returns who gave them.
func useApprovals(row *storedRow, tool, key string, args json.RawMessage, now time.Time) []string {
	if len(row.Approvals) == 0 || len(args) == 0 {
		return []string{}
	}
	h := ArgsHash(tool, args)
	row.Approvals = slices.Clone(row.Approvals)
	used := []string{}
	for i, ap := range row.Approvals {
		if ap.Args != h || ap.Used != "" || (!ap.Expires.IsZero() && !now.Before(ap.Expires)) {
			continue
		}
		row.Approvals[i].Used = key
		if !slices.Contains(used, ap.By) {
			used = append(used, ap.By)
		}
	}
	return used
}
