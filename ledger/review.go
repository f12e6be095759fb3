package ledger

import (
	"encoding/json"
	"fmt"
	"slices"
)

// The row-level marks a person (or docket) makes: Approve, Reject, Edit
// (and ShowResolved), Skip, Compensated, and Resolve of an action in
// needs_review. One type and one rule per kind; mark holds what they share.

type approveOp struct {
	at
	args   json.RawMessage
	by     string
	groups []string  // the approver's groups
	big    *bigValue // args when large (large.go)
}

type rejectOp struct {
	at
	reason, by string
}

type editOp struct {
	at
	args     json.RawMessage
	by       string
	big      *bigValue
	resolved bool // ShowResolved: docket's own edit, event action.args_resolved
}

type skipOp struct {
	at
	reason   string
	noEffect bool // no attempt took effect (budget.go)
}

type compensatedOp struct{ at }

type resolveOp struct {
	at
	res Resolution
}

func (a *approveOp) kind() opKind     { return opApprove }
func (r *rejectOp) kind() opKind      { return opReject }
func (e *editOp) kind() opKind        { return opEdit }
func (s *skipOp) kind() opKind        { return opSkip }
func (c *compensatedOp) kind() opKind { return opCompensated }
func (r *resolveOp) kind() opKind     { return opResolve }

func (a *approveOp) scope() (string, *bigValue) { return a.runID, a.big }
func (e *editOp) scope() (string, *bigValue)    { return e.runID, e.big }

// mark is a row being marked by an op of kind: its run, the row and the
// record of the row's key (zero when it has none).
type mark struct {
	kind opKind
	at
	run storedRun
	row storedRow
	rec KeyRecord
}

// markRow loads the row that op kind marks and its key's record.
func (b *batch) markRow(kind opKind, w at) (*mark, Result, error) {
	run, row, err := b.runRow(w)
	if err != nil {
		res, err := opFailure(err)
		return nil, res, err
	}
	m := &mark{kind: kind, at: w, run: run, row: row}
	if row.Key != "" {
		if m.rec, _, err = b.keyRec(w.runID, row.Key); err != nil {
			return nil, Result{}, err
		}
	}
	return m, Result{}, nil
}

// unclaimed: the row was never claimed (pending or approved, no key).
func (m *mark) unclaimed() bool {
	return m.row.Key == "" && (m.row.Status == StatusPending || m.row.Status == StatusApproved)
}

// done is the op's success: the row and its key record as they are.
func (m *mark) done(b *batch) (Result, error) {
	return Result{Action: b.rowAction(m.runID, m.row, m.rec), Key: m.rec}, nil
}

// refuse is the op's conflict with the row's status.
func (m *mark) refuse(b *batch) (Result, error) {
	return b.conflict(m.kind, m.runID, m.actionID, m.row.Key, m.rec, &m.row, "action is %s", m.row.Status), nil
}

// write writes the row (and its key record when recChanged) with the
// event.
func (m *mark) write(b *batch, recChanged bool, evType EventType, data json.RawMessage) (Result, error) {
	if recChanged {
		if err := b.putKeyRec(m.rec, false); err != nil {
			return Result{}, err
		}
	}
	if err := b.putRow(m.runID, m.run.Revision, m.row); err != nil {
		return Result{}, err
	}
	if err := b.event(m.runID, evType, m.actionID, data); err != nil {
		return Result{}, err
	}
	return m.done(b)
}

func (a *approveOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := validJSON("args", a.args, false); err != nil {
		return errResult(err), nil
	}
	m, res, err := b.markRow(opApprove, a.at)
	if m == nil {
		return res, err
	}
	args := a.args
	if args == nil {
		args = m.row.Args
	}
	if m.row.Status == StatusApproved && m.row.Key == "" {
		same, err := a.holds(b, m, args)
		if err != nil {
			return Result{}, err
		}
		if same {
			return m.done(b)
		}
	}
	if !m.unclaimed() {
		return m.refuse(b)
	}
	if ok, why := m.row.Gate.MayApprove(a.by, a.groups, m.run.CreatedBy); !ok {
		return errResult(fmt.Errorf("%w: %s", ErrApproverRefused, why)), nil
	}
	return a.add(b, m, args)
}

// holds reports whether the approved row is approved for args already:
// the same args, and under a gate, approvals that have not expired since.
func (a *approveOp) holds(b *batch, m *mark, args json.RawMessage) (bool, error) {
	same, err := b.sameArgs(a.runID, m.row.ApprovedArgs, args, a.big)
	if err != nil || !same || m.row.Gate == nil {
		return same, err
	}
	cur := m.row.action(a.runID)
	plain, err := b.blob(a.runID, args)
	if err != nil {
		return false, err
	}
	cur.ApprovedArgs = plain
	return m.row.Gate.Need == 0 || len(cur.Approvers(plain, b.now())) >= m.row.Gate.Need, nil
}

// add records the approval; once the row has the approvals it needs, it
// is approved for args.
func (a *approveOp) add(b *batch, m *mark, args json.RawMessage) (Result, error) {
	plain, err := b.blob(a.runID, args)
	if err != nil {
		return Result{}, err
	}
	row := &m.row
	cur := row.action(a.runID)
	if cur.ApprovedArgs, err = b.blob(a.runID, row.ApprovedArgs); err != nil {
		return Result{}, err
	}
	now := b.now()
	if slices.Contains(cur.Approvers(plain, now), a.by) && row.Gate != nil {
		return m.done(b) // this person's approval of these args is recorded
	}
	ap := Approval{By: a.by, Groups: a.groups, At: now, Args: ArgsHash(row.Tool, plain)}
	if row.Gate != nil && row.Gate.TTL > 0 {
		ap.Expires = now.Add(row.Gate.TTL)
	}
	cur.Approvals = append(slices.Clone(row.Approvals), ap)
	row.Approvals = cur.Approvals
	have, need := len(cur.Approvers(plain, now)), cur.Needed()
	if have < need {
		return m.write(b, false, EventActionApprovalAdded, approvedData(a.by, a.groups, have, need))
	}
	if args, err = b.stash(a.runID, args, a.big); err != nil {
		return Result{}, err
	}
	row.Status, row.ApprovedArgs = StatusApproved, args
	data := obj("by", a.by)
	if row.Gate != nil {
		data = approvedData(a.by, a.groups, have, need)
	}
	return m.write(b, false, EventActionApproved, data)
}

// approvedData is the data of action.approved and action.approval_added
// under a gate: who, with its groups when it has any, and the count.
func approvedData(by string, groups []string, have, need int) json.RawMessage {
	if len(groups) > 0 {
		return obj("by", by, "groups", groups, "approvals", have, "need", need)
	}
	return obj("by", by, "approvals", have, "need", need)
}

func (r *rejectOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	m, res, err := b.markRow(opReject, r.at)
	if m == nil {
		return res, err
	}
	if m.row.Status == StatusRejected {
		return m.done(b)
	}
	if !m.unclaimed() {
		return m.refuse(b)
	}
	m.row.Status, m.row.Error, m.row.ApprovedArgs = StatusRejected, r.reason, nil
	return m.write(b, false, EventActionRejected, obj("reason", r.reason, "by", r.by))
}

func (e *editOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := validJSON("args", e.args, true); err != nil {
		return errResult(err), nil
	}
	m, res, err := b.markRow(opEdit, e.at)
	if m == nil {
		return res, err
	}
	if !m.unclaimed() {
		return m.refuse(b)
	}
	same, err := b.sameArgs(e.runID, m.row.Args, e.args, e.big)
	if err != nil {
		return Result{}, err
	}
	if same {
		return m.done(b)
	}
	args, err := b.stash(e.runID, e.args, e.big)
	if err != nil {
		return Result{}, err
	}
	m.row.Status, m.row.Args, m.row.ApprovedArgs, m.row.Approvals = StatusPending, args, nil, nil
	if e.resolved {
		return m.write(b, false, EventActionArgsResolved, argsData(e.args))
	}
	return m.write(b, false, EventActionEdited, argsData(e.args, "by", e.by))
}

func (s *skipOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	m, res, err := b.markRow(opSkip, s.at)
	if m == nil {
		return res, err
	}
	if m.row.Status == StatusSkipped {
		return m.done(b)
	}
	// A retryable failure left the row pending with its key.
	retryPending := m.row.Key != "" && m.row.Status == StatusPending && m.rec.State == StatusPending
	if !m.unclaimed() && !retryPending {
		return m.refuse(b)
	}
	m.row.Status = StatusSkipped
	data := obj("reason", s.reason)
	if retryPending {
		m.rec.State, m.rec.UpdatedAt = StatusSkipped, b.now()
		if !m.rec.MaybeTookEffect || s.noEffect {
			// No attempt took effect: the budgets get it back.
			if data, err = b.release(m.rec.Key, data); err != nil {
				return Result{}, err
			}
		}
	}
	return m.write(b, retryPending, EventActionSkipped, data)
}

func (c *compensatedOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	m, res, err := b.markRow(opCompensated, c.at)
	if m == nil {
		return res, err
	}
	if m.row.Status == StatusCompensated {
		return m.done(b)
	}
	if m.row.Status != StatusSucceeded {
		return m.refuse(b)
	}
	m.row.Status = StatusCompensated
	recChanged := m.row.Key != "" && m.rec.State == StatusSucceeded
	if recChanged {
		m.rec.State, m.rec.UpdatedAt = StatusCompensated, b.now()
	}
	return m.write(b, recChanged, EventActionCompensated, nil)
}

// check: exactly one of Done, Retry, Skip; Done an output that fits.
func (r Resolution) check(maxOutput int) error {
	n := 0
	for _, set := range []bool{r.Done != nil, r.Retry, r.Skip} {
		if set {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("%w: a resolution is exactly one of done, retry, skip", ErrInvalid)
	}
	if r.Done == nil {
		return nil
	}
	if len(r.Done) > maxOutput {
		return fmt.Errorf("%w: output of %d bytes exceeds %d", ErrTooLarge, len(r.Done), maxOutput)
	}
	return validJSON("output", r.Done, true)
}

// outcome is the state r leads to and its name in action.resolved.
func (r Resolution) outcome() (Status, string) {
	switch {
	case r.Done != nil:
		return StatusSucceeded, "done"
	case r.Retry:
		return StatusPending, "retry"
	}
	return StatusSkipped, "skip"
}

func (o *resolveOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	r := o.res
	if err := r.check(b.tx.MaxOutputBytes()); err != nil {
		return errResult(err), nil
	}
	run, row, err := b.runRow(o.at)
	if err != nil {
		return opFailure(err)
	}
	if row.Key == "" {
		return b.conflict(opResolve, o.runID, o.actionID, "", KeyRecord{}, &row, "action was never claimed (status %s)", row.Status), nil
	}
	m := &mark{kind: opResolve, at: o.at, run: run, row: row}
	if m.rec, _, err = b.keyRec(o.runID, row.Key); err != nil {
		return Result{}, err
	}
	want, _ := r.outcome()
	if m.rec.State != StatusNeedsReview {
		if m.rec.State == want && (r.Done == nil || jsonEqual(m.rec.Output, r.Done)) {
			return m.done(b) // identical repeat
		}
		return b.conflict(opResolve, o.runID, o.actionID, row.Key, m.rec, &m.row, "action is not in needs_review"), nil
	}
	return o.write(b, m)
}

// write applies the resolution to the key record and the row, with
// action.resolved (and action.skipped for Skip).
func (o *resolveOp) write(b *batch, m *mark) (Result, error) {
	r := o.res
	want, resolution := r.outcome()
	rec, row := &m.rec, &m.row
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
		var err error
		if data, err = b.release(row.Key, data); err != nil {
			return Result{}, err
		}
	}
	row.Status, row.Error = want, rec.Error
	res, err := m.write(b, true, EventActionResolved, data)
	if err != nil || !r.Skip {
		return res, err
	}
	if err := b.event(o.runID, EventActionSkipped, o.actionID, obj("reason", "resolved by "+r.By)); err != nil {
		return Result{}, err
	}
	return res, nil
}
