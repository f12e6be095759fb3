package ledger

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The ledger decides: every fact that makes an action start is checked
// again by the claim's own rule, in the claim's transaction, on every
// backend. What a caller decided in its own memory (the run is not paused,
// the row is as it read it, the approvals count, the run's totals) is a fast
// path; a writer on another node may have changed any of it since. A claim
// that would start an action on stale facts is refused with a *StaleError
// and writes nothing; the caller reads again and decides again.

// ErrStale: a claim was decided on facts that changed since they were read
// (see *StaleError): nothing of the claim was written.
var ErrStale = errors.New("ledger: claim decided on facts that changed")

// StaleError is a claim refused because what its caller decided from no
// longer holds: the run was paused or cancelled, the action was edited, its
// approvals no longer count for exactly the arguments being sent, or
// another action of the run started since the run's totals were read.
type StaleError struct {
	RunID, ActionID string
	// Run is the run's status and PausedBy who paused it ("" : no person).
	Run      RunStatus
	PausedBy string
	Msg      string
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("ledger: claim of run %q action %q refused: %s", e.RunID, e.ActionID, e.Msg)
}

// Is makes errors.Is(err, ErrStale) and errors.Is(err, ErrConflict) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale || target == ErrConflict }

// basis is what a claim's caller decided from (Op.Decided, Op.Parking,
// Op.Uncounted).
type basis struct {
	decided     bool
	rowArgs     json.RawMessage // the row's args as read (planned, maybe with references)
	gate        Gate            // the gate the caller decided under
	anyApproval bool            // any approval of the action counts (Satisfied)
	parking     bool            // the claim parks the action for a person: never a call
	uncounted   []string        // actions the run's totals left out (not started)
	newRun      bool            // decided from the rows being recorded (InNewRun)
}

// Decided states what a claim's caller decided from: the row's args as it
// read them (rowArgs) and the gate it decided under (g; anyApproval as in
// Action.Satisfied). The first claim of a key is then refused with a
// *StaleError when the row's args are no longer rowArgs (edited since), or
// when the approvals recorded on the row do not satisfy g, and the row's
// own recorded gate, for exactly the claim's args. A claim without it is
// still checked against the row's recorded gate.
func (o Op) Decided(rowArgs json.RawMessage, g Gate, anyApproval bool) Op {
	return o.withBasis(func(b *basis) {
		b.decided, b.rowArgs, b.gate, b.anyApproval = true, rowArgs, g, anyApproval
	})
}

// Parking marks a claim that only parks the action for a person (it is
// never followed by a call): it is not refused because the run is paused
// or cancelled.
func (o Op) Parking() Op {
	return o.withBasis(func(b *basis) { b.parking = true })
}

// Uncounted names the actions of the run whose amounts the caller's totals
// left out because they had not started (policy rules over the run's
// totals): the claim is refused with a *StaleError when one of them has
// started since (claimed, or with an outcome), in this commit or another.
func (o Op) Uncounted(actionIDs ...string) Op {
	ids := slices.Clone(actionIDs)
	return o.withBasis(func(b *basis) { b.uncounted = ids })
}

// InNewRun marks a claim decided from the rows of a run being recorded in
// the same Apply (NewRun before it), not from a read: it is refused with a
// *StaleError, having read nothing but the run and row and written
// nothing, unless an op before it in the same Apply created the run. A
// run recorded before (by another caller, or with another plan) is decided
// from as recorded, after a read.
func (o Op) InNewRun() Op {
	return o.withBasis(func(b *basis) { b.newRun = true })
}

// withBasis returns a copy of claim o whose basis set changes; on other
// ops, an op that is ErrInvalid.
func (o Op) withBasis(set func(*basis)) Op {
	c, ok := o.body.(*claimOp)
	if !ok {
		o.misuse |= misuseBasis
		return o
	}
	cc := *c
	b := basis{}
	if c.basis != nil {
		b = *c.basis
	}
	set(&b)
	cc.basis = &b
	o.body = &cc
	return o
}

// admit checks a claim that would start an action against the facts in
// the store: nil, or the *StaleError that refuses it. first: the key has no
// record yet (the action's first claim).
func (b *batch) admit(o *claimOp, run storedRun, row storedRow, first bool) (error, error) {
	bs := o.basis
	if bs == nil {
		bs = &basis{}
	}
	why, err := b.runMoved(o, bs, run)
	if why == "" && err == nil && first && !bs.parking {
		// A retry or a takeover needs no more: the first claim was admitted.
		why, err = b.unapproved(o, bs, run, row)
	}
	if why == "" || err != nil {
		return nil, err
	}
	return &StaleError{RunID: o.runID, ActionID: o.actionID, Run: run.Status, PausedBy: run.PausedBy, Msg: why}, nil
}

// runMoved says why the run no longer lets the claim start ("": it does):
// it was cancelled or paused by a person (unless the claim only parks the
// action), or an action the caller's totals left out started since.
func (b *batch) runMoved(o *claimOp, bs *basis, run storedRun) (string, error) {
	if !bs.parking {
		switch {
		case run.Status == RunCancelled:
			return "the run is cancelled", nil
		case run.PausedBy != "":
			return "the run is paused by " + run.PausedBy, nil
		}
	}
	for _, id := range bs.uncounted {
		if id == o.actionID {
			continue
		}
		r, ok, err := b.row(o.runID, run.Revision, id)
		if err != nil {
			return "", err
		}
		if ok && r.action(o.runID).CountsInTotals() {
			return fmt.Sprintf("action %s started since the run's totals were read", id), nil
		}
	}
	return "", nil
}

// unapproved says why the row does not let its first claim start ("": it
// does): it was edited since the caller read it, or a gate (the row's
// recorded one, and the one the caller decided under) denies it or is not
// satisfied for exactly the claim's args.
func (b *batch) unapproved(o *claimOp, bs *basis, run storedRun, row storedRow) (string, error) {
	if bs.decided {
		cur, err := b.blob(o.runID, row.Args)
		if err != nil {
			return "", err
		}
		if !jsonEqual(cur, bs.rowArgs) {
			return "the action was edited since it was read", nil
		}
	}
	a := row.action(o.runID)
	var err error
	if a.ApprovedArgs, err = b.blob(o.runID, row.ApprovedArgs); err != nil {
		return "", err
	}
	now := b.now()
	var gates []Gate
	if row.Gate != nil {
		gates = append(gates, *row.Gate)
	}
	if bs.decided && (row.Gate == nil || !gateEqual(row.Gate, &bs.gate)) {
		gates = append(gates, bs.gate)
	}
	for _, g := range gates {
		if g.Outcome == "deny" {
			return fmt.Sprintf("rule %s denies it", cmpOr(g.Rule, "of the run's policy")), nil
		}
		anyApproval := bs.anyApproval
		if !bs.decided {
			anyApproval = g.Rule == "" // only the run's policy asked: as recorded
		}
		if ok, why := a.Satisfied(g, o.args, run.CreatedBy, anyApproval, now); !ok {
			return "not approved for the arguments being sent: " + why, nil
		}
	}
	return "", nil
}

// CountsInTotals reports whether a's amounts count in its run's totals
// (policy rules over run.totals): it started (a key, an attempt) and may
// have taken or take effect; compensating actions never count.
func (a Action) CountsInTotals() bool {
	if a.Undo || a.Attempts == 0 || a.Key == "" {
		return false
	}
	switch a.Status {
	case StatusClaimed, StatusSucceeded, StatusNeedsReview, StatusPending, StatusApproved:
		return true
	}
	return false
}

// Satisfied reports whether the approvals recorded on a count for exactly
// args under gate g, for a run created by creator, at now; if not, why.
// g needing nobody is satisfied. anyApproval: only the run's approval
// policy asked for a person (no rule) and the tool may be retried, so any
// approval of the action counts, as it always did. An approval from before
// approvals were recorded (ApprovedArgs set, no Approvals) counts once, for
// a row without a gate of its own, and never for a budget's gate: a budget
// is passed only now, so it cannot have been approved before.
func (a Action) Satisfied(g Gate, args json.RawMessage, creator string, anyApproval bool, now time.Time) (bool, string) {
	if g.Need == 0 {
		return true, ""
	}
	why := cmp.Or(g.Why, g.Rule)
	if anyApproval {
		if a.ApprovedArgs != nil {
			return true, ""
		}
		return false, why
	}
	if a.ApprovedArgs == nil && len(a.Approvals) == 0 {
		return false, why
	}
	have := 0
	for _, ap := range a.Counting(args, now) {
		if ap.By == "" {
			if a.Gate == nil && g.Need == 1 && g.Budget == "" {
				have++
			}
			continue
		}
		if ok, _ := g.MayApprove(ap.By, ap.Groups, creator); ok {
			have++
		}
	}
	if have >= g.Need {
		return true, ""
	}
	if a.ApprovedArgs != nil && !jsonEqual(a.ApprovedArgs, args) {
		return false, "arguments changed since approval (references resolved): " + why
	}
	return false, fmt.Sprintf("%s: %d of %d approvals", why, have, g.Need)
}
