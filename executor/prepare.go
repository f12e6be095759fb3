package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

// prepare resolves a node's references, validates the resolved args, derives
// the key and checks the approval. It runs on the drive's loop (it reads the
// drive's state and the ledger, and writes nothing).
//
// planned are the actions prepared before it in the same commit to be
// claimed: the run's totals count them.
func (d *driver) prepare(ctx context.Context, n *node, outputs map[string]json.RawMessage, planned []ledger.Action) prep {
	row := n.row
	if row.Key != "" && (row.Status == ledger.StatusClaimed || (sentBefore(row) && d.failErr != "")) {
		// Claimed before (a restart, or another drive), or failing: decide
		// from the key it was claimed under, as recorded.
		return prepWork{a: newAct(n, row.Key, row.Args)}
	}
	resolved := row.Args
	if row.Key == "" && len(n.refs) > 0 {
		r, err := plan.Resolve(n.args, outputs)
		if err != nil {
			return d.prepFail(n, fmt.Sprintf("resolve references: %v", err))
		}
		resolved = r
	}
	if err := d.e.reg.ValidateResolved(row.Tool, resolved); err != nil {
		return d.prepFail(n, fmt.Sprintf("resolved arguments: %v", err))
	}
	key, err := plan.Key(d.runID, n.id, row.Tool, resolved)
	if err != nil {
		return d.prepFail(n, fmt.Sprintf("derive key: %v", err))
	}
	a := newAct(n, key, resolved)
	a.checked = true
	if row.Key == key && row.Attempts > 0 {
		return prepWork{a: a} // attempted before under this key: decide from the record
	}
	return d.decideNew(ctx, a, planned)
}

// newAct is the act of n under key with resolved args.
func newAct(n *node, key string, args json.RawMessage) *act {
	return &act{n: n, key: key, args: args, row: n.row}
}

// decideNew decides the first claim of a new key: the policy's gate, the
// budgets', the approvals, the key's record (decideStart).
func (d *driver) decideNew(ctx context.Context, a *act, planned []ledger.Action) prep {
	n, row := a.n, a.n.row
	prun, uncounted := d.policyRun(n.id, n.spec, planned)
	bc := d.checkBudgets(ctx, row.Tool, a.args)
	var rec *ledger.KeyRecord
	var err error
	if bc.gate != nil {
		// Exceeded, unless the key reserved its share before (a replay's
		// unchanged action): its hold is in the usage already and a claim
		// never reserves twice.
		if rec, err = d.key(ctx, n, a.key); err != nil {
			return prepAwait{n: n}
		} else if rec != nil {
			bc = budgetCheck{}
		}
	}
	g := d.e.decideGate(d.pol, n.spec, policy.Input{ActionID: n.id, Key: a.key, Args: a.args, Run: prun}, bc)
	var decideOp []ledger.Op
	var gate *ledger.Gate
	if (row.Gate != nil || g.Rule != "") && !gateEqual(row.Gate, g) {
		decideOp, gate = []ledger.Op{ledger.Decide(d.runID, n.id, g)}, &g
	}
	ok, why := d.approved(n, a.args, g)
	if !ok && rec == nil {
		// Maybe the key has an outcome already (replay of an unchanged action).
		if rec, err = d.key(ctx, n, a.key); err != nil {
			return prepAwait{n: n}
		}
	}
	// The replay preview decides with the same function (PreviewReplay).
	switch decideStart(startFacts{gate: g, approved: ok, rec: rec}) {
	case startDeny:
		// Never runs: recorded as rejected by the policy, with the rule's
		// message (the run fails; a new plan can do without it).
		reason := deniedReason(g)
		d.e.log.Info("action denied by policy", "run_id", d.runID, "action_id", n.id, "rule", g.Rule)
		return prepDeny{n: n, reason: reason, ops: append(decideOp, ledger.Reject(d.runID, n.id, reason, "policy"))}
	case startKeep, startMirrorFailed, startMirrorReview, startMirrorSkipped, startRefuse:
		a.rec = rec // the worker mirrors the key's outcome
		return prepWork{a: a}
	case startAwait:
		d.e.log.Debug("action waits for approval", "run_id", d.runID, "action_id", n.id, "reason", why)
		return awaitPrep(d.runID, n, a.args, g, decideOp, gate)
	}
	// startRun
	a.fresh = true
	rowArgs, anyApproval := row.Args, d.anyApproval(n, g)
	a.basis = func(o ledger.Op) ledger.Op {
		o = o.Decided(rowArgs, g, anyApproval)
		if uncounted != nil {
			o = o.Uncounted(uncounted...)
		}
		return o
	}
	a.charges = bc.charges
	if g.Need > 0 {
		a.charges = bc.withOver() // approved: past the exceeded budgets too
	}
	return prepClaim{a: a, ops: decideOp} // the decision is written with the claim
}

// awaitPrep is the prep of an action that waits for approval under gate g
// (decideOp/gate: the gate's decision, when it is to be recorded).
func awaitPrep(runID string, n *node, resolved json.RawMessage, g ledger.Gate, decideOp []ledger.Op, gate *ledger.Gate) prepAwait {
	p := prepAwait{n: n}
	row := n.row
	if !jsonEqual(row.Args, resolved) {
		// Show the reviewer what will be sent.
		p.ops = append(p.ops, ledger.ShowResolved(runID, n.id, resolved))
		p.shown = resolved
	}
	if decideOp == nil && row.Status == ledger.StatusApproved && (row.Gate != nil || p.shown == nil) {
		// Approved once, but the approvals no longer count (expired, or
		// given for other args: an "approve all" that read the row before
		// its references were resolved for review): the row says it
		// waits again, so the next "approve all" finds it. (An Edit to
		// the resolved args, above, already puts it back to pending.)
		decideOp, gate = []ledger.Op{ledger.Decide(runID, n.id, g)}, &g
	}
	p.ops = append(p.ops, decideOp...)
	p.gate = gate
	return p
}

// key reads key's record for prepare: nil when it has none; on a read
// error the drive stops (fatal) and err is set.
func (d *driver) key(ctx context.Context, n *node, key string) (*ledger.KeyRecord, error) {
	rec, err := d.e.led.Key(ctx, key)
	switch {
	case err == nil:
		return &rec, nil
	case errors.Is(err, ledger.ErrNotFound):
		return nil, nil
	}
	d.setFatal(&ActionError{RunID: d.runID, ActionID: n.id, Key: key, Op: "read key", Err: err})
	return nil, err
}

// prepFail is the prep of an action whose arguments cannot be sent (msg):
// it is claimed and failed at once under the key of its recorded args.
func (d *driver) prepFail(n *node, msg string) prep {
	key, err := plan.Key(d.runID, n.id, n.row.Tool, n.row.Args)
	if err != nil {
		// Cannot even derive one.
		d.setFatal(&ActionError{RunID: d.runID, ActionID: n.id, Op: "prepare", Err: errors.New(msg)})
		return prepDrop{n: n}
	}
	return prepFail{a: newAct(n, key, n.row.Args), msg: msg, ops: []ledger.Op{
		ledger.Claim(d.runID, n.id, n.row.Tool, key, n.row.Args, 1),
		ledger.FailWith(key, 1, msg, false, ledger.FailureInvalidArgs, nil),
	}}
}

// approved reports whether an action may be claimed with these resolved args
// under gate g without asking a person (ledger.Action.Satisfied, the rule the
// ledger checks again in the claim): g needs nobody, or enough distinct
// people approved exactly these args (not expired, not used, allowed by g).
func (d *driver) approved(n *node, resolved json.RawMessage, g ledger.Gate) (bool, string) {
	return n.row.Satisfied(g, resolved, d.run.CreatedBy, d.anyApproval(n, g), d.e.clock.Now())
}

// anyApproval: when only the run's policy asked for a person (no rule) and
// the tool is not at-most-once, any approval of the action counts, as it
// always did.
func (d *driver) anyApproval(n *node, g ledger.Gate) bool {
	return g.Rule == "" && n.spec.Class != tools.AtMostOnce
}

// policyRun is the run as the policy sees it for action skip of tool spec,
// with planned (actions about to be claimed with it) counted in its totals.
// The totals cost a pass over every row (O(actions) per call), so they are
// summed only when one of the rules that apply to spec can read the run;
// then uncounted lists the actions they leave out because they have not
// started, for the ledger to check that none has when the claim commits
// (nil when the totals are not read).
func (d *driver) policyRun(skip string, spec tools.Spec, planned []ledger.Action) (policy.Run, []string) {
	if !readsRun(d.e.rules(spec)) {
		return d.e.runInput(d.run, spec, nil, skip), nil
	}
	rows := make([]ledger.Action, 0, len(d.nodes)+len(planned))
	uncounted := []string{}
	for _, n := range d.nodes {
		if slices.ContainsFunc(planned, func(a ledger.Action) bool { return a.ID == n.id }) {
			continue
		}
		rows = append(rows, n.row)
		if n.id != skip && !n.row.Undo && (n.row.Key == "" || n.row.Attempts == 0) &&
			(n.row.Status == ledger.StatusPending || n.row.Status == ledger.StatusApproved) {
			uncounted = append(uncounted, n.id)
		}
	}
	rows = append(rows, planned...)
	slices.Sort(uncounted)
	return d.e.runInput(d.run, spec, rows, skip), uncounted
}
