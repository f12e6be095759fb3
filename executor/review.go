package executor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// reviewable reports whether a row was never claimed (review may still change it).
func reviewable(r ledger.Action) bool {
	return !r.Undo && r.Attempts == 0 &&
		(r.Status == ledger.StatusPending || r.Status == ledger.StatusApproved)
}

// undoAwaiting reports whether r is a compensating action that was never
// claimed: it waits for a person's approval (approve or reject it).
func undoAwaiting(r ledger.Action) bool {
	return r.Undo && r.Attempts == 0 && (r.Status == ledger.StatusPending || r.Status == ledger.StatusApproved)
}

// lockUndriven takes runID's gate with claimMu held for writing at a moment
// when no drive of this process drives the run, waiting up to
// Config.BusyWait (or until ctx ends) for drives to stop. A drive claims from
// the rows it loaded, so a change to a row it may still start (edit, reject)
// or a new revision made under it would be ignored or overwritten; made here,
// every later drive reads it. unlock releases both.
func (e *Engine) lockUndriven(ctx context.Context, runID, op, what string) (g *gate, unlock func(), err error) {
	g = acquireGate(e.led, runID)
	t := time.NewTimer(e.cfg.BusyWait)
	defer t.Stop()
	for {
		select {
		case <-g.whenUndriven():
		case <-t.C:
			releaseGate(e.led, runID, g)
			return nil, nil, fmt.Errorf("executor: %s: run %s: %w: the run is being driven (an action is in flight or about to start), "+
				"and a drive works from the rows it loaded, so it cannot %s now: try again once it stops "+
				"(pause the run to make it stop sooner)", op, runID, ErrBusy, what)
		case <-ctx.Done():
			releaseGate(e.led, runID, g)
			return nil, nil, fmt.Errorf("executor: %s: run %s: %w", op, runID, ctx.Err())
		}
		g.claimMu.Lock()
		if !g.driving() {
			return g, func() {
				g.claimMu.Unlock()
				releaseGate(e.led, runID, g)
			}, nil
		}
		g.claimMu.Unlock() // a new drive started meanwhile: wait for it too
	}
}

func (e *Engine) rowsByID(ctx context.Context, runID, op string) (map[string]ledger.Action, []ledger.Action, error) {
	rows, err := e.led.Actions(ctx, runID)
	if err != nil {
		return nil, nil, fmt.Errorf("executor: %s: run %s: %w", op, runID, err)
	}
	m := make(map[string]ledger.Action, len(rows))
	for _, r := range rows {
		m[r.ID] = r
	}
	return m, rows, nil
}

// applyReview applies ops and turns conflicts into ErrNotReviewable errors
// naming the action.
func (e *Engine) applyReview(ctx context.Context, runID, op string, ids []string, ops []ledger.Op) error {
	_, err := e.applyReviewResults(ctx, runID, op, ids, ops)
	return err
}

// applyReviewResults is applyReview that also returns the ops' results.
func (e *Engine) applyReviewResults(ctx context.Context, runID, op string, ids []string, ops []ledger.Op) ([]ledger.Result, error) {
	res, err := e.led.Apply(ctx, ops...)
	if err != nil {
		return nil, fmt.Errorf("executor: %s: run %s: %w", op, runID, err)
	}
	var errs []error
	for i, r := range res {
		if r.Err == nil {
			continue
		}
		if errors.Is(r.Err, ledger.ErrConflict) {
			errs = append(errs, &ActionError{RunID: runID, ActionID: ids[i], Key: r.Key.Key, Op: op,
				Err: fmt.Errorf("%w (%w)", ErrNotReviewable, r.Err)})
			continue
		}
		errs = append(errs, &ActionError{RunID: runID, ActionID: ids[i], Op: op, Err: r.Err})
	}
	return res, errors.Join(errs...)
}

// ErrNothingNamed: Approve was given no action ids. Approving every waiting
// action is ApproveAll, never the meaning of an empty list (a message that
// forgot its ids must not approve an email nobody looked at).
var ErrNothingNamed = errors.New("executor: approve names no action (to approve every waiting action, use ApproveAll)")

// Approve approves the named actions as the reviewer saw them (ErrNothingNamed
// when actionIDs is empty). It does not drive the run; call Resume.
func (e *Engine) Approve(ctx context.Context, runID string, actionIDs []string, by string) error {
	return e.ApproveAs(ctx, runID, actionIDs, ledger.Approver{By: by})
}

// ApproveAs is Approve by who with its groups (a token's groups, from the
// service's tokens file), recorded with each approval: a policy rule or
// budget that names approver groups admits who by them. An action whose
// gate admits neither who's name nor its groups is refused with an error
// wrapping ledger.ErrApproverRefused that says who may approve.
func (e *Engine) ApproveAs(ctx context.Context, runID string, actionIDs []string, who ledger.Approver) error {
	if len(actionIDs) == 0 {
		return fmt.Errorf("run %s: %w", runID, ErrNothingNamed)
	}
	return e.approve(ctx, runID, actionIDs, who)
}

// ApproveAll approves every action of the run that waits for a person's
// approval, as the reviewer saw them. It does not drive the run; call Resume.
func (e *Engine) ApproveAll(ctx context.Context, runID, by string) error {
	return e.approve(ctx, runID, nil, ledger.Approver{By: by})
}

// ApproveAllAs is ApproveAll by who with its groups (ApproveAs).
func (e *Engine) ApproveAllAs(ctx context.Context, runID string, who ledger.Approver) error {
	return e.approve(ctx, runID, nil, who)
}

func (e *Engine) approve(ctx context.Context, runID string, actionIDs []string, who ledger.Approver) error {
	byID, rows, err := e.rowsByID(ctx, runID, "approve")
	if err != nil {
		return err
	}
	var ops []ledger.Op
	var ids []string
	if len(actionIDs) == 0 {
		for _, r := range rows {
			if (reviewable(r) || undoAwaiting(r)) && r.Status == ledger.StatusPending {
				ops = append(ops, ledger.ApproveAs(runID, r.ID, r.Args, who))
				ids = append(ids, r.ID)
			}
		}
	} else {
		for _, id := range actionIDs {
			r, ok := byID[id]
			if !ok {
				return &ActionError{RunID: runID, ActionID: id, Op: "approve", Err: ledger.ErrNotFound}
			}
			if !reviewable(r) && !undoAwaiting(r) {
				return &ActionError{RunID: runID, ActionID: id, Key: r.Key, Op: "approve",
					Err: fmt.Errorf("%w: status %s after %d attempts", ErrNotReviewable, r.Status, r.Attempts)}
			}
			ops = append(ops, ledger.ApproveAs(runID, r.ID, r.Args, who))
			ids = append(ids, r.ID)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	res, err := e.applyReviewResults(ctx, runID, "approve", ids, ops)
	if ao, ok := e.obs.(ApprovalObserver); ok {
		for i, r := range res {
			if r.Err == nil && r.Action.Status == ledger.StatusApproved {
				ao.Approved(runID, ids[i])
			}
		}
	}
	return err
}

// Reject rejects one action that was never started. The run then fails:
// actions not started yet are skipped, actions already started finish and
// are recorded (nothing started is abandoned), and nothing is compensated.
// While a drive of this process drives the run, Reject waits for it to stop
// (Config.BusyWait), then refuses with ErrBusy.
func (e *Engine) Reject(ctx context.Context, runID, actionID, reason, by string) error {
	_, unlock, err := e.lockUndriven(ctx, runID, "reject", "reject action "+actionID)
	if err != nil {
		return err
	}
	defer unlock()
	byID, _, err := e.rowsByID(ctx, runID, "reject")
	if err != nil {
		return err
	}
	r, ok := byID[actionID]
	if !ok {
		return &ActionError{RunID: runID, ActionID: actionID, Op: "reject", Err: ledger.ErrNotFound}
	}
	if !reviewable(r) {
		return &ActionError{RunID: runID, ActionID: actionID, Key: r.Key, Op: "reject",
			Err: fmt.Errorf("%w: status %s after %d attempts", ErrNotReviewable, r.Status, r.Attempts)}
	}
	return e.applyReview(ctx, runID, "reject", []string{actionID}, []ledger.Op{ledger.Reject(runID, actionID, reason, by)})
}

// Edit changes a not-yet-claimed action's arguments (validated against the
// tool's schema); its key changes accordingly. While a drive of this process
// drives the run, Edit waits for it to stop (Config.BusyWait), then refuses
// with ErrBusy: the drive would send the action with the arguments it loaded.
func (e *Engine) Edit(ctx context.Context, runID, actionID string, args json.RawMessage, by string) error {
	_, unlock, err := e.lockUndriven(ctx, runID, "edit", "edit action "+actionID)
	if err != nil {
		return err
	}
	defer unlock()
	p, err := e.led.Plan(ctx, runID, 0)
	if err != nil {
		return fmt.Errorf("executor: edit: run %s: %w", runID, err)
	}
	byID, _, err := e.rowsByID(ctx, runID, "edit")
	if err != nil {
		return err
	}
	r, ok := byID[actionID]
	if !ok {
		return &ActionError{RunID: runID, ActionID: actionID, Op: "edit", Err: ledger.ErrNotFound}
	}
	if !reviewable(r) {
		return &ActionError{RunID: runID, ActionID: actionID, Key: r.Key, Op: "edit",
			Err: fmt.Errorf("%w: status %s after %d attempts", ErrNotReviewable, r.Status, r.Attempts)}
	}
	// Check the edited action in the context of its plan (references must name
	// dependencies, args must fit the schema).
	pc := *p
	pc.Actions = slices.Clone(p.Actions)
	found := false
	for i := range pc.Actions {
		if pc.Actions[i].ID == actionID {
			pc.Actions[i].Args = args
			found = true
		}
	}
	if !found {
		return &ActionError{RunID: runID, ActionID: actionID, Op: "edit", Err: ledger.ErrNotFound}
	}
	if err := pc.Validate(e.reg); err != nil {
		return &ActionError{RunID: runID, ActionID: actionID, Op: "edit", Err: invalidPlan(err)}
	}
	return e.applyReview(ctx, runID, "edit", []string{actionID}, []ledger.Op{ledger.Edit(runID, actionID, args, by)})
}

// Resolve applies a person's decision to an action in needs_review. A Done
// output is validated against the tool's output schema if it has one.
func (e *Engine) Resolve(ctx context.Context, runID, actionID string, r ledger.Resolution) error {
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
		return &ActionError{RunID: runID, ActionID: actionID, Op: "resolve",
			Err: errors.New("give exactly one of done (with an output), retry or skip")}
	}
	byID, _, err := e.rowsByID(ctx, runID, "resolve")
	if err != nil {
		return err
	}
	row, ok := byID[actionID]
	if !ok {
		return &ActionError{RunID: runID, ActionID: actionID, Op: "resolve", Err: ledger.ErrNotFound}
	}
	if row.Status != ledger.StatusNeedsReview {
		return &ActionError{RunID: runID, ActionID: actionID, Key: row.Key, Op: "resolve",
			Err: fmt.Errorf("%w: status %s, not needs_review", ErrNotReviewable, row.Status)}
	}
	if r.Done != nil {
		if !json.Valid(r.Done) {
			return &ActionError{RunID: runID, ActionID: actionID, Key: row.Key, Op: "resolve",
				Err: errors.New("done output is not valid JSON")}
		}
		if err := e.reg.ValidateOutput(row.Tool, r.Done); err != nil {
			return &ActionError{RunID: runID, ActionID: actionID, Key: row.Key, Op: "resolve",
				Err: fmt.Errorf("done output does not match the output schema of %s: %w", row.Tool, err)}
		}
		if _, err := plan.Canonical(r.Done); err != nil {
			return &ActionError{RunID: runID, ActionID: actionID, Key: row.Key, Op: "resolve", Err: err}
		}
	}
	return e.applyReview(ctx, runID, "resolve", []string{actionID}, []ledger.Op{ledger.Resolve(runID, actionID, r)})
}

// Pause stops a run until a person resumes it (Unpause): no new action
// starts, in-flight ones finish and are recorded. The pause is recorded on the
// run (ledger.Run.PausedBy), so it holds across processes: approving an
// action, rerunning `docket run` or `docket step`, Resume and a restart of the
// service all leave the run paused.
func (e *Engine) Pause(ctx context.Context, runID, by string) error {
	return e.setStatusByPerson(ctx, runID, ledger.RunPaused, by)
}

// Cancel stops a run for good: no new action starts; in-flight ones finish and
// are recorded; actions never started are skipped.
func (e *Engine) Cancel(ctx context.Context, runID, by string) error {
	return e.setStatusByPerson(ctx, runID, ledger.RunCancelled, by)
}

// Unpause lifts a person's pause (Pause), as by: the run is running again and
// the next drive (Resume) continues it. A run that is not paused by a person
// is left as it is (nil). A completed, failed or cancelled run is refused
// (ErrNotReviewable): there is nothing to resume. It does not drive the run.
func (e *Engine) Unpause(ctx context.Context, runID, by string) error {
	g := acquireGate(e.led, runID)
	defer releaseGate(e.led, runID, g)
	g.claimMu.Lock()
	defer g.claimMu.Unlock()
	run, err := e.led.GetRun(ctx, runID)
	if err != nil {
		return fmt.Errorf("executor: resume run %s: %w", runID, err)
	}
	switch run.Status {
	case ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled:
		return fmt.Errorf("executor: resume run %s: %w: the run is %s: there is nothing to resume", runID, ErrNotReviewable, run.Status)
	}
	if run.PausedBy == "" {
		if g.status == ledger.RunPaused {
			g.pausedByPerson = false // paused by a person before pauses were recorded
		}
		return nil
	}
	// Paused by a person; or a pause another status change ended, whose
	// PausedBy is left over: SetPause clears it too, so that a later pause
	// for another reason (an action needs review) is not taken for a
	// person's (a run that would then wait for nobody).
	if _, err := applyLead(ctx, e.led, ledger.SetPause(runID, "", ledger.RunRunning, mustJSON(map[string]string{"by": by, "reason": "requested"}))); err != nil {
		return fmt.Errorf("executor: resume run %s: %w", runID, err)
	}
	if run.Status == ledger.RunPaused {
		g.status = ledger.RunRunning
		e.obs.RunStatus(runID, ledger.RunRunning)
	}
	g.pausedByPerson = false
	e.log.Info("run resumed by a person", "run_id", runID)
	return nil
}

func (e *Engine) setStatusByPerson(ctx context.Context, runID string, st ledger.RunStatus, by string) error {
	g := acquireGate(e.led, runID)
	defer releaseGate(e.led, runID, g)
	g.claimMu.Lock()
	defer g.claimMu.Unlock()
	run, err := e.led.GetRun(ctx, runID)
	if err != nil {
		return fmt.Errorf("executor: %s run %s: %w", st, runID, err)
	}
	switch run.Status {
	case ledger.RunCompleted, ledger.RunFailed, ledger.RunCancelled:
		return fmt.Errorf("executor: %s run %s: %w: the run is %s", st, runID, ErrNotReviewable, run.Status)
	}
	data := mustJSON(map[string]string{"by": by, "reason": "requested"})
	var ops []ledger.Op // ops[lead] is the status change
	lead := 0
	if st == ledger.RunPaused {
		ops = append(ops, ledger.SetPause(runID, cmp.Or(by, "a person"), "", data))
	} else {
		// Actions never started will never start: say so (a drive in flight
		// claims nothing once the status is written, under the same lock).
		// A replay's unchanged actions whose keys already succeeded keep
		// them instead: their effect exists (linked before the status
		// changes).
		rows, err := e.led.Actions(ctx, runID)
		if err != nil {
			return fmt.Errorf("executor: %s run %s: %w", st, runID, err)
		}
		links, err := linkEarlier(ctx, e.led, runID, rows, nil)
		if err != nil {
			return err
		}
		var skips []ledger.Op
		for _, r := range rows {
			if op, ok := links[r.ID]; ok {
				ops = append(ops, op)
			} else if reviewable(r) && r.Key == "" {
				skips = append(skips, ledger.Skip(runID, r.ID, "not started: the run was cancelled"))
			}
		}
		lead = len(ops)
		ops = append(ops, ledger.SetRunStatus(runID, st, ledger.EventRunCancelled, "", data))
		ops = append(ops, skips...)
	}
	res, err := e.led.Apply(ctx, ops...)
	if err == nil {
		err = res[lead].Err // a link or a skip that conflicts is no error
	}
	if err != nil {
		return fmt.Errorf("executor: %s run %s: %w", st, runID, err)
	}
	g.status = st
	g.pausedByPerson = st == ledger.RunPaused
	if run.Status != st {
		e.obs.RunStatus(runID, st)
	}
	e.log.Info("run status set by a person", "run_id", runID, "status", string(st))
	return nil
}
