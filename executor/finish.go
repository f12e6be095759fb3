package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

// finish runs once nothing more can start: skips what will never run,
// compensates after a failure and sets the run's status.
func (d *driver) finish(ctx context.Context) error {
	if d.settled {
		return nil
	}
	if d.quiet() {
		// Nothing to skip or compensate as far as this drive knows; settle
		// reads the rows afresh (another drive may know more).
		return d.settle(ctx)
	}
	rows, err := d.e.led.Actions(ctx, d.runID)
	if err != nil {
		return fmt.Errorf("executor: run %s: read actions: %w", d.runID, err)
	}
	for _, r := range rows {
		if r.Undo {
			continue
		}
		switch r.Status {
		case ledger.StatusFailed:
			d.fail(fmt.Sprintf("action %s failed: %s", r.ID, r.Error), false)
		case ledger.StatusRejected:
			d.fail(fmt.Sprintf("action %s was rejected", r.ID), true)
		}
	}
	byID := make(map[string]ledger.Action, len(rows))
	for _, r := range rows {
		byID[r.ID] = r
	}
	var ops []ledger.Op
	var skipped []string
	if d.failErr != "" {
		if open := d.open(byID); len(open) > 0 {
			// Every action that was claimed must have its outcome recorded
			// before the run fails: its call may have taken effect (it is
			// never "not started", and compensation must see it if it
			// succeeded).
			d.e.log.Warn("run failing, but claimed actions have no outcome yet; not finishing it now",
				"run_id", d.runID, "actions", open, "error", d.failErr)
			return nil
		}
		if ops, skipped, err = d.skipFailed(ctx, rows, byID); err != nil {
			return err
		}
	} else {
		ops, skipped = d.skipAfterSkipped(rows, byID)
	}
	if err := d.skip(ctx, ops, skipped, byID); err != nil {
		return err
	}
	if d.failErr != "" && !d.rejected {
		if err := d.compensate(ctx, byID); err != nil {
			return err
		}
		if d.fatal != nil {
			return d.fatal
		}
	}
	return d.settle(ctx)
}

// quiet reports whether, as far as this drive knows, nothing failed, was
// rejected or skipped.
func (d *driver) quiet() bool {
	if d.failErr != "" {
		return false
	}
	for _, n := range d.nodes {
		if n.row.Status == ledger.StatusSkipped || n.row.Status == ledger.StatusFailed || n.row.Status == ledger.StatusRejected {
			return false
		}
	}
	return true
}

// open lists the actions claimed without an outcome yet, in order.
func (d *driver) open(byID map[string]ledger.Action) []string {
	var open []string
	for _, id := range d.order {
		if r := byID[id]; r.Status == ledger.StatusClaimed || sentBefore(r) {
			open = append(open, id)
		}
	}
	return open
}

// skipFailed are the ops of a failing run: what never started is skipped,
// except a replay's unchanged action whose key succeeded (linked).
func (d *driver) skipFailed(ctx context.Context, rows []ledger.Action, byID map[string]ledger.Action) ([]ledger.Op, []string, error) {
	links, err := linkEarlier(ctx, d.e.led, d.runID, rows, d.tmpl)
	if err != nil {
		return nil, nil, err
	}
	var ops []ledger.Op
	var skipped []string
	for _, id := range d.order {
		if op, ok := links[id]; ok {
			ops = append(ops, op)
			skipped = append(skipped, id)
			continue
		}
		if r := byID[id]; r.Attempts == 0 && (r.Status == ledger.StatusPending || r.Status == ledger.StatusApproved) {
			ops = append(ops, ledger.Skip(d.runID, id, "not started: the run failed ("+d.failErr+")"))
			skipped = append(skipped, id)
		}
	}
	return ops, skipped, nil
}

// skipAfterSkipped skips the reviewable actions that depend on a skipped one.
func (d *driver) skipAfterSkipped(rows []ledger.Action, byID map[string]ledger.Action) ([]ledger.Op, []string) {
	gone := map[string]bool{}
	for _, r := range rows {
		if r.Status == ledger.StatusSkipped {
			gone[r.ID] = true
		}
	}
	var ops []ledger.Op
	var skipped []string
	for _, id := range d.order {
		r := byID[id]
		if !reviewable(r) {
			continue
		}
		if i := slices.IndexFunc(r.DependsOn, func(dep string) bool { return gone[dep] }); i >= 0 {
			ops = append(ops, ledger.Skip(d.runID, id, "dependency "+r.DependsOn[i]+" was skipped"))
			skipped = append(skipped, id)
			gone[id] = true
		}
	}
	return ops, skipped
}

// skip writes ops (skips or links of the actions skipped) and brings byID
// up to date.
func (d *driver) skip(ctx context.Context, ops []ledger.Op, skipped []string, byID map[string]ledger.Action) error {
	if len(ops) == 0 {
		return nil
	}
	res, err := d.e.led.Apply(ctx, ops...)
	if err != nil {
		return fmt.Errorf("executor: run %s: skip actions: %w", d.runID, err)
	}
	for i, r := range res {
		if r.Err != nil && !errors.Is(r.Err, ledger.ErrConflict) {
			return &ActionError{RunID: d.runID, ActionID: skipped[i], Op: "skip", Err: r.Err}
		}
		if r.Action.ID == skipped[i] {
			byID[skipped[i]] = r.Action // linked rows are succeeded: compensation sees them
		}
	}
	return nil
}

// compensate runs the compensations of succeeded actions in reverse completion
// order, each as action "<id>.undo" with its own key.
func (d *driver) compensate(ctx context.Context, byID map[string]ledger.Action) error {
	order, err := d.undoOrder(ctx, byID)
	if err != nil {
		return err
	}
	for _, id := range order {
		if ctx.Err() != nil {
			return fmt.Errorf("executor: run %s: compensation: %w", d.runID, ctx.Err())
		}
		if err := d.compensateOne(ctx, id, byID); err != nil {
			return err
		}
		if d.fatal != nil {
			return d.fatal
		}
	}
	return nil
}

// undoOrder lists the actions that count as succeeded, newest first: the
// ones a person marked done (action.resolved) as well.
func (d *driver) undoOrder(ctx context.Context, byID map[string]ledger.Action) ([]string, error) {
	evs, err := d.e.led.Events(ctx, d.runID, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("executor: run %s: read events for compensation: %w", d.runID, err)
	}
	last := map[string]uint64{}
	for _, ev := range evs {
		if (ev.Type == ledger.EventActionSucceeded || ev.Type == ledger.EventActionResolved) && ev.ActionID != "" {
			last[ev.ActionID] = ev.Seq
		}
	}
	var order []string
	for id := range last {
		if r, ok := byID[id]; ok && !r.Undo {
			order = append(order, id)
		}
	}
	slices.SortFunc(order, func(a, b string) int { return -cmpU(last[a], last[b]) }) // newest first
	return order, nil
}

// compensateOne undoes action id, when it succeeded and its tool names a
// compensation. Errors of the ledger end the drive (returned, or d.fatal).
func (d *driver) compensateOne(ctx context.Context, id string, byID map[string]ledger.Action) error {
	row := byID[id]
	if row.Status != ledger.StatusSucceeded {
		return nil
	}
	t, ok := d.e.reg.Get(row.Tool)
	if !ok || t.Spec().Compensate == nil {
		return nil
	}
	undoID := id + ".undo"
	ur, exists := byID[undoID]
	switch {
	case exists && (ur.Status == ledger.StatusNeedsReview || ur.Status == ledger.StatusFailed ||
		ur.Status == ledger.StatusSkipped || ur.Status == ledger.StatusRejected):
		return nil // a person decides, or decided it is not undone
	case exists && ur.Status == ledger.StatusSucceeded:
		// Undone (a person marked the undo done): say so on the original.
		a := &act{n: &node{id: undoID}, key: ur.Key}
		d.record(ctx, a, ledger.Compensated(d.runID, id))
		d.absorbEffects(a)
		return nil
	}
	a := d.undoAct(id, row, *t.Spec().Compensate, ur, exists)
	if a == nil {
		return nil
	}
	defer d.absorbEffects(a)
	if a.row.Attempts == 0 && d.undoWaits(ctx, a, exists) {
		return nil
	}
	d.e.log.Info("compensating", "run_id", d.runID, "action_id", id, "undo", undoID, "key", a.key)
	out, how := d.execute(ctx, a)
	if how == endSucceeded {
		d.record(ctx, a, ledger.Succeed(a.key, a.attempt, out), ledger.Compensated(d.runID, id))
	}
	a.releaseKey()
	return nil
}

// undoAct is the act that undoes action id (row) with comp; ur is its
// undo row when one exists. nil: it cannot be built (logged).
func (d *driver) undoAct(id string, row ledger.Action, comp tools.Compensation, ur ledger.Action, exists bool) *act {
	undoID := id + ".undo"
	ct, ok := d.e.reg.Get(comp.Tool)
	if !ok {
		d.e.log.Error("compensating tool not registered", "run_id", d.runID, "action_id", id, "tool", comp.Tool)
		return nil
	}
	args, err := tools.CompensationArgs(comp, row.Args, row.Output)
	if err != nil {
		d.e.log.Error("cannot build compensation arguments", "run_id", d.runID, "action_id", id, "error", err)
		return nil
	}
	key, err := plan.Key(d.runID, undoID, comp.Tool, args)
	if err != nil {
		d.e.log.Error("cannot derive compensation key", "run_id", d.runID, "action_id", id, "error", err)
		return nil
	}
	spec := ct.Spec()
	un := &node{id: undoID, tool: ct, spec: spec, row: ledger.Action{
		RunID: d.runID, ID: undoID, Tool: comp.Tool, Class: string(spec.Class),
		Status: ledger.StatusPending, Args: args, Undo: true,
	}}
	if exists {
		un.row = ur
	}
	a := newAct(un, key, args)
	a.undoOf = id
	if !exists {
		a.preOps = []ledger.Op{ledger.AddUndo(d.runID, un.row)}
	}
	return a
}

// undoWaits reports whether the undo a waits for approval: an undo is an
// action like any other, the tools file's approval rules and the run's
// policy apply to it (a rule never refuses it: a person decides instead).
func (d *driver) undoWaits(ctx context.Context, a *act, exists bool) bool {
	un, spec := a.n, a.n.spec
	prun, _ := d.policyRun(un.id, spec, nil)
	g := d.e.gateFor(d.pol, spec, policy.Input{ActionID: un.id, Key: a.key, Args: a.args, Run: prun}, false)
	if g.Outcome == string(policy.Deny) {
		g.Outcome, g.Need, g.Why = string(policy.Approve), 1, deniedReason(g)+"; a compensation waits for a person instead"
	}
	ok, why := d.approved(un, a.args, g)
	if ok {
		return false
	}
	if !exists && !d.record(ctx, a, a.preOps...) {
		return true
	}
	d.undoAwaiting = append(d.undoAwaiting, un.id)
	d.e.log.Info("compensation waits for approval", "run_id", d.runID, "action_id", a.undoOf, "undo", un.id, "reason", why)
	return true
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// settle sets the run's status from its rows once this drive is done.
func (d *driver) settle(ctx context.Context) error {
	return d.g.write(func() error {
		if d.g.status == ledger.RunCancelled || (d.g.status == ledger.RunPaused && d.g.pausedByPerson) {
			return nil
		}
		rows, err := d.e.led.Actions(ctx, d.runID)
		if err != nil {
			return fmt.Errorf("executor: run %s: read actions: %w", d.runID, err)
		}
		st, ok := d.settleTo(rows)
		if !ok {
			return nil // another drive is performing an action; it settles the run
		}
		if st.status == "" {
			return d.stalled(rows)
		}
		if st.status == d.g.status {
			return nil
		}
		var raw []byte
		if st.data != nil {
			raw = mustJSON(st.data)
		}
		res, doc, err := applyDoc(ctx, d.e.led, d.runID, ledger.SetRunStatus(d.runID, st.status, st.ev, st.errMsg, raw))
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			return fmt.Errorf("executor: run %s: set status %s: %w", d.runID, st.status, err)
		}
		d.endDoc = doc
		d.g.status = st.status
		d.e.obs.RunStatus(d.runID, st.status)
		d.e.log.Info("run status", "run_id", d.runID, "status", string(st.status), "error", st.errMsg)
		return nil
	})
}

// settled is the status a drive's end gives its run.
type settlement struct {
	status ledger.RunStatus // "": none (the run goes on)
	ev     ledger.EventType
	errMsg string
	data   map[string]any
}

// rowTally sums up the rows for settle.
type rowTally struct {
	claimed         bool
	needs, awaiting []string
	failMsg         string
	open, started   int
}

func (d *driver) tally(rows []ledger.Action) rowTally {
	var t rowTally
	for _, r := range rows {
		switch r.Status {
		case ledger.StatusClaimed:
			t.claimed = true
		case ledger.StatusNeedsReview:
			t.needs = append(t.needs, r.ID)
		case ledger.StatusFailed, ledger.StatusRejected:
			if !r.Undo && t.failMsg == "" {
				t.failMsg = failureMsg(r)
			}
		case ledger.StatusPending, ledger.StatusApproved:
			if sentBefore(r) {
				t.started++
			}
			if !r.Undo {
				t.open++
				if n := d.nodes[r.ID]; n != nil && n.awaiting && r.Attempts == 0 {
					t.awaiting = append(t.awaiting, r.ID)
				}
			}
		}
	}
	return t
}

// failureMsg says why the run fails at failed or rejected row r.
func failureMsg(r ledger.Action) string {
	if r.Status == ledger.StatusRejected {
		return rejectedMsg(r)
	}
	return fmt.Sprintf("action %s failed: %s", r.ID, r.Error)
}

// settleTo is the status rows give the run (ok false: an action is
// claimed, another drive performs it; status "": none, the run goes on).
func (d *driver) settleTo(rows []ledger.Action) (settlement, bool) {
	t := d.tally(rows)
	if t.claimed {
		return settlement{}, false
	}
	failMsg := cmpOr(t.failMsg, d.failErr)
	switch {
	case len(t.needs) > 0:
		return settlement{ledger.RunPaused, ledger.EventRunPaused, "", map[string]any{"reason": "needs_review", "actions": t.needs}}, true
	case failMsg != "" && t.started > 0:
		return settlement{}, false // a claimed action still needs its outcome: a later drive concludes it first
	case len(d.undoAwaiting) > 0:
		return settlement{ledger.RunAwaitingApproval, ledger.EventRunAwaitingApproval, "", map[string]any{"actions": d.undoAwaiting}}, true
	case failMsg != "":
		return settlement{ledger.RunFailed, ledger.EventRunFailed, failMsg, map[string]any{"error": failMsg}}, true
	case len(t.awaiting) > 0:
		return settlement{ledger.RunAwaitingApproval, ledger.EventRunAwaitingApproval, "", map[string]any{"actions": t.awaiting}}, true
	case t.open == 0:
		return settlement{status: ledger.RunCompleted, ev: ledger.EventRunCompleted}, true
	}
	return settlement{}, true
}

// stalled is the end of a drive that leaves open actions: nothing is in
// flight, nothing waits for a person, and yet an action is ready: the
// scheduler missed it. Never a normal end. With another drive of this
// process on the run, that one performs the rest.
func (d *driver) stalled(rows []ledger.Action) error {
	stuck := d.ready(rows)
	if len(stuck) == 0 || otherDrives(d.e.led, d.runID) {
		return nil
	}
	d.e.log.Error("executor bug: run stopped with ready actions not started", "run_id", d.runID, "actions", stuck)
	return &StallError{RunID: d.runID, Actions: stuck}
}

// ErrStalled is the sentinel of StallError.
var ErrStalled = errors.New("executor: run stopped with ready actions not started (a bug in docket)")

// StallError says a drive ended with actions ready to run that it never
// started, while nothing was in flight and nothing waited for a person. It is
// a bug in docket, reported loudly instead of leaving the run "running": the
// ledger is intact and driving the run again continues it.
type StallError struct {
	RunID   string
	Actions []string // ready actions (approved, dependencies succeeded) never started
}

func (e *StallError) Error() string {
	return fmt.Sprintf("executor: run %s stopped with actions %s ready but not started: this is a bug in docket, please report it; "+
		"nothing was lost, and driving the run again (the same command) continues it", e.RunID, strings.Join(e.Actions, ", "))
}

func (e *StallError) Unwrap() error { return ErrStalled }

// ErrUndone is the sentinel of a replay refused because it would build on an
// action that was undone (compensated).
var ErrUndone = errors.New("executor: a compensated action cannot be reused")

// refuseUndone refuses a new revision that keeps an action unchanged whose
// effect was undone: its key would return the undone output, and the rest of
// the plan would build on an effect that no longer exists. The person changes
// the action's arguments (a new key: it runs again) or forks the run.
func refuseUndone(runID string, old []ledger.Action, oldPlan, next *plan.Plan) error {
	planned := map[string]plan.Action{}
	if oldPlan != nil {
		for _, a := range oldPlan.Actions {
			planned[a.ID] = a
		}
	}
	byID := map[string]ledger.Action{}
	for _, r := range old {
		byID[r.ID] = r
	}
	var undone []string
	for _, a := range next.Actions {
		r, ok := byID[a.ID]
		if !ok || r.Status != ledger.StatusCompensated || r.Tool != a.Tool {
			continue
		}
		if pa, ok := planned[a.ID]; ok && pa.Tool == a.Tool && jsonEqual(pa.Args, a.Args) {
			undone = append(undone, a.ID)
		}
	}
	if len(undone) == 0 {
		return nil
	}
	return fmt.Errorf("%w: replay run %s: %s was compensated (undone) and is unchanged in the new plan: "+
		"its key would return the undone output; change its arguments so it runs again under a new key, or fork the run to start over",
		ErrUndone, runID, strings.Join(undone, ", "))
}

// refuseUndoneReplay applies refuseUndone to the run's current revision.
func (e *Engine) refuseUndoneReplay(ctx context.Context, run ledger.Run, next *plan.Plan) error {
	old, err := e.led.Actions(ctx, run.ID)
	if err != nil {
		return fmt.Errorf("executor: replay run %s: read actions: %w", run.ID, err)
	}
	oldPlan, err := e.led.Plan(ctx, run.ID, run.Revision)
	if err != nil {
		return fmt.Errorf("executor: replay run %s: read plan revision %d: %w", run.ID, run.Revision, err)
	}
	return refuseUndone(run.ID, old, oldPlan, next)
}

// linkEarlier returns, by action id, Claim ops that link rows never claimed
// in the current revision to keys of theirs that already succeeded: a
// replay's unchanged actions that the drive did not reach before the run
// failed or was cancelled. Their effect exists, so they keep their key and
// output (and compensation sees them), never "skipped: not started". Rows
// are linked in dependency order (to a fixpoint), so a linked action's
// output resolves its dependents' references. tmpl: the args to resolve
// from, for rows whose args were written back resolved (may be nil).
func linkEarlier(ctx context.Context, led ledger.Store, runID string, rows []ledger.Action, tmpl map[string]json.RawMessage) (map[string]ledger.Op, error) {
	outputs := map[string]json.RawMessage{}
	for _, r := range rows {
		if !r.Undo && r.Status == ledger.StatusSucceeded {
			outputs[r.ID] = r.Output
		}
	}
	links := map[string]ledger.Op{}
	for more := true; more; {
		more = false
		for _, r := range rows {
			if _, done := links[r.ID]; done || r.Key != "" || !reviewable(r) {
				continue
			}
			args := r.Args
			if tm, ok := tmpl[r.ID]; ok {
				args = tm
			}
			refs, err := plan.Refs(args)
			if err != nil || slices.ContainsFunc(refs, func(ref plan.Ref) bool { _, ok := outputs[ref.Action]; return !ok }) {
				continue // its arguments cannot be known: it never ran under them
			}
			resolved, err := plan.Resolve(args, outputs)
			if err != nil {
				continue
			}
			key, err := plan.Key(runID, r.ID, r.Tool, resolved)
			if err != nil {
				continue
			}
			rec, err := led.Key(ctx, key)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
				continue
			case err != nil:
				return nil, fmt.Errorf("executor: run %s: action %s: read key: %w", runID, r.ID, err)
			}
			if rec.State != ledger.StatusSucceeded || rec.RunID != runID || rec.ActionID != r.ID {
				continue
			}
			links[r.ID] = ledger.Claim(runID, r.ID, r.Tool, key, resolved, rec.Attempt+1)
			outputs[r.ID] = rec.Output
			more = true
		}
	}
	return links, nil
}

// rejectedMsg is the run's error for a rejected action: a person's
// rejection, or the policy's denial with its rule and message.
func rejectedMsg(r ledger.Action) string {
	if strings.HasPrefix(r.Error, deniedPrefix) {
		return fmt.Sprintf("action %s was %s", r.ID, r.Error)
	}
	return fmt.Sprintf("action %s was rejected", r.ID)
}
