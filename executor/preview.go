package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

// Replay preview: what Replay with a plan would do, before anything is
// recorded (docket replay --dry-run).

// What a preview says of an action.
const (
	PreviewKeeps   = "keeps"            // its key succeeded before: the recorded output is reused, nothing runs
	PreviewRuns    = "runs"             // a new key (or one with no outcome yet): it would run (with Approval: once those people approved it)
	PreviewFollows = "follows"          // it refers to the output of an action that runs (or depends on one decided only then): known once that ran
	PreviewDenied  = "denied"           // a rule or a budget denies it: the replay would fail there
	PreviewFails   = "fails"            // its key failed before (mirrored: nothing is called), or its resolved arguments are invalid: the replay fails there
	PreviewReview  = "waits_for_review" // its key needs review: mirrored (nothing is called); the replay waits for a person
	PreviewWaits   = "waits"            // it depends on an action that waits for a person: decided once that one is settled
	PreviewSkipped = "skipped"          // never started: the replay fails before it, or a dependency of it is skipped
	PreviewRefused = "refused"          // its key was compensated (undone): the replay fails there
)

// PreviewStep is one action of a previewed replay.
type PreviewStep struct {
	ActionID string `json:"action_id"`
	Tool     string `json:"tool"`
	Outcome  string `json:"outcome"` // one of the Preview constants
	Key      string `json:"key,omitempty"`
	// Approval is the policy's decision when people must approve the call
	// before it runs (its rule, how many, who may), or the deny. When a
	// budget would be exceeded (counting what the replay's earlier new
	// actions would reserve first), its outcome is the decision and
	// Approval.Budget names it. An action skipped because the replay fails
	// before it keeps the approval it was waiting for.
	Approval *ledger.Gate `json:"approval,omitempty"`
	// Undone: it succeeds (runs or keeps its output), but the replay
	// fails after it and its tool's compensation undoes it.
	Undone bool   `json:"undone,omitempty"`
	Why    string `json:"why"`
}

// PreviewReplay says, for each action of p in plan order, what a replay of
// run runID with p would do with it: reuse its key's recorded output, run
// it (and whom it would have to wait for), mirror its key's failure or
// review, deny it, or never start it because the replay fails before it.
//
// It walks the new revision the way a drive that starts one action at a
// time does (dependencies first, ties in plan order) and decides each
// action with the drive's own decision (decideStart on the gate of
// decideGate): rules that read the run's totals see the actions the walk
// already started (the kept ones and the ones that run), a budget is
// measured on the recorded usage plus what those actions reserve first.
// With more than one action in flight, an action the drive already started
// alongside the one the replay fails at may still run where the preview
// says skipped. An action whose arguments refer to an output that only
// the replay will produce is decided then (PreviewFollows), and is not
// counted in the totals of the actions after it.
//
// It refuses what Replay refuses (ErrUndone, ErrBusy). Nothing is recorded.
func (e *Engine) PreviewReplay(ctx context.Context, runID string, p *plan.Plan) ([]PreviewStep, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: preview replay of run %s: no plan", ErrInvalidPlan, runID)
	}
	if err := p.Validate(e.reg); err != nil {
		return nil, fmt.Errorf("executor: preview replay of run %s: %w", runID, invalidPlan(err))
	}
	run, err := e.led.GetRun(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("executor: preview replay of run %s: %w", runID, err)
	}
	pc := *p
	pc.RunID = runID
	if err := e.refuseUndoneReplay(ctx, run, &pc); err != nil {
		return nil, err
	}
	cur, err := e.led.Actions(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("executor: preview replay of run %s: %w", runID, err)
	}
	if err := unsettled(runID, cur); err != nil {
		return nil, err
	}
	pol := Policy(run.Policy)
	if !pol.valid() {
		pol = PolicySafe
	}
	next := run
	next.Revision++
	// The rows the replay would record, each with its approval as planned.
	rows, err := e.initialRows(&pc, pol, run.CreatedBy, next.Revision)
	if err != nil {
		return nil, err
	}
	w := &previewWalk{
		e: e, pol: pol, run: next,
		// A driver that is never driven: its rows are the replay's as the
		// walk goes (the totals of runInput, the approvals of approved).
		d:       &driver{e: e, runID: runID, run: next, pol: pol, sched: sched{nodes: map[string]*node{}}},
		steps:   map[string]*PreviewStep{},
		state:   map[string]walkState{},
		outputs: map[string]json.RawMessage{},
		pending: map[string]*big.Rat{},
	}
	actions := map[string]plan.Action{}
	for _, a := range pc.Actions {
		actions[a.ID] = a
	}
	for _, r := range rows {
		t, _ := e.reg.Get(r.Tool) // the plan was validated
		w.d.nodes[r.ID] = &node{id: r.ID, row: r, tool: t, spec: t.Spec(), args: r.Args}
	}
	order := topo(rows)
	for _, id := range order {
		if err := w.step(ctx, actions[id]); err != nil {
			return nil, err
		}
	}
	if err := w.finish(ctx, order, actions); err != nil {
		return nil, err
	}
	out := make([]PreviewStep, 0, len(pc.Actions))
	for _, a := range pc.Actions {
		out = append(out, *w.steps[a.ID])
	}
	return out, nil
}

// walkState is where an action of a previewed replay ends up in the drive.
type walkState int

const (
	wsThrough   walkState = iota + 1 // it succeeds: its dependents start after it
	wsUndecided                      // decided only during the replay (PreviewFollows)
	wsHeld                           // not started: it waits for a person, or for an action that does
	wsDead                           // it never succeeds: denied, failed, refused, skipped
)

// previewWalk is one replay preview as it walks the new revision.
type previewWalk struct {
	e     *Engine
	d     *driver
	pol   Policy
	run   ledger.Run // at the new revision
	steps map[string]*PreviewStep
	state map[string]walkState
	// outputs are the outputs known before the replay runs (kept keys').
	outputs map[string]json.RawMessage
	// pending is, by budget bucket, what the actions that run reserve first.
	pending map[string]*big.Rat
	// failAt is the action the replay fails at ("": none); rejected: it
	// was denied (no compensation follows).
	failAt   string
	rejected bool
}

// step decides action a, all of whose dependencies were walked.
func (w *previewWalk) step(ctx context.Context, a plan.Action) error {
	st := &PreviewStep{ActionID: a.ID, Tool: a.Tool}
	w.steps[a.ID] = st
	if w.failAt != "" {
		w.state[a.ID] = wsHeld // never started: finish says what becomes of it
		return nil
	}
	var dead, held, undecided string
	for _, dep := range a.DependsOn {
		switch w.state[dep] {
		case wsDead:
			dead = cmpOr(dead, dep)
		case wsHeld:
			held = cmpOr(held, dep)
		case wsUndecided:
			undecided = cmpOr(undecided, dep)
		}
	}
	refs, err := plan.Refs(a.Args)
	if err != nil {
		return fmt.Errorf("%w: action %s: %w", ErrInvalidPlan, a.ID, err)
	}
	unknown := ""
	for _, r := range refs {
		if _, ok := w.outputs[r.Action]; !ok {
			unknown = r.Action
			break
		}
	}
	switch {
	case dead != "":
		// Only a skipped key leaves a dead dependency without failing the run.
		st.Outcome, st.Why = PreviewSkipped, fmt.Sprintf("dependency %s is skipped", dead)
		w.state[a.ID] = wsDead
		return nil
	case unknown != "":
		st.Outcome, st.Why = PreviewFollows, fmt.Sprintf("refers to the output of %s, which runs first: known once it ran", unknown)
		w.state[a.ID] = wsUndecided
		if held != "" {
			w.state[a.ID] = wsHeld
		}
		return nil
	case held != "":
		st.Outcome, st.Why = PreviewWaits, fmt.Sprintf("depends on %s, which waits for a person: decided once that is settled", held)
		w.state[a.ID] = wsHeld
		return nil
	case undecided != "":
		st.Outcome, st.Why = PreviewFollows, fmt.Sprintf("depends on %s, which is decided only during the replay: decided after it", undecided)
		w.state[a.ID] = wsUndecided
		return nil
	}
	return w.decide(ctx, a, st)
}

// decide is the drive's decision on an action whose dependencies succeed
// and whose arguments resolve: driver.prepare's steps, on the rows the
// replay would have by then.
func (w *previewWalk) decide(ctx context.Context, a plan.Action, st *PreviewStep) error {
	e, n := w.e, w.d.nodes[a.ID]
	fail := func(msg string) error {
		st.Outcome, st.Why = PreviewFails, "it fails before its call: "+msg
		w.state[a.ID] = wsDead
		w.failed(a.ID, false)
		n.row.Status, n.row.Error = ledger.StatusFailed, msg
		return nil
	}
	resolved, err := plan.Resolve(a.Args, w.outputs)
	if err != nil {
		return fail(fmt.Sprintf("resolve references: %v", err))
	}
	if err := e.reg.ValidateResolved(a.Tool, resolved); err != nil {
		return fail(fmt.Sprintf("resolved arguments: %v", err))
	}
	if st.Key, err = plan.Key(w.run.ID, a.ID, a.Tool, resolved); err != nil {
		return fail(fmt.Sprintf("derive key: %v", err))
	}
	var rec *ledger.KeyRecord
	switch r, err := e.led.Key(ctx, st.Key); {
	case err == nil:
		rec = &r
	case !errors.Is(err, ledger.ErrNotFound):
		return fmt.Errorf("executor: preview: action %s: read key: %w", a.ID, err)
	}
	var bc budgetCheck
	if rec == nil {
		// Only a key's first claim reserves: an existing key holds its share.
		bc = e.checkBudgets(ctx, w.run.ID, w.run.CreatedBy, a.Tool, resolved, w.pending)
	}
	g := e.decideGate(w.pol, n.spec, policy.Input{ActionID: a.ID, Key: st.Key, Args: resolved, Run: w.runInput(a.ID, n.spec)}, bc)
	approved, _ := w.d.approved(n, resolved, g)
	v := decideStart(startFacts{gate: g, approved: approved, rec: rec})
	st.Why = startWhy(rec, v)
	switch v {
	case startDeny:
		st.Outcome, st.Approval = PreviewDenied, &g
		st.Why += deniedReason(g)
		w.state[a.ID] = wsDead
		w.failed(a.ID, true)
		n.row.Status = ledger.StatusRejected
	case startKeep:
		st.Outcome, st.Why = PreviewKeeps, fmt.Sprintf("same key as before: its recorded output (attempt %d) is reused", rec.Attempt)
		w.state[a.ID] = wsThrough
		w.outputs[a.ID] = rec.Output
		n.row.Status, n.row.Key, n.row.Attempts, n.row.Args = ledger.StatusSucceeded, st.Key, rec.Attempt, rec.Args
	case startMirrorFailed:
		st.Outcome = PreviewFails
		st.Why += fmt.Sprintf("the replay mirrors its failure (%s) without calling it, and fails there", rec.Error)
		w.state[a.ID] = wsDead
		w.failed(a.ID, false)
		n.row.Status, n.row.Key, n.row.Attempts, n.row.Error = ledger.StatusFailed, st.Key, rec.Attempt, rec.Error
	case startMirrorReview:
		st.Outcome = PreviewReview
		st.Why += "its outcome is unknown: the replay waits for a person to resolve it"
		w.state[a.ID] = wsHeld
		n.row.Status, n.row.Key, n.row.Attempts = ledger.StatusNeedsReview, st.Key, rec.Attempt
	case startMirrorSkipped:
		st.Outcome = PreviewSkipped
		st.Why += "a person skipped it: so does the replay"
		w.state[a.ID] = wsDead
		n.row.Status, n.row.Key = ledger.StatusSkipped, st.Key
	case startRefuse:
		st.Outcome = PreviewRefused
		st.Why += "its effect was undone: the replay refuses to build on it and fails there (change its arguments, or fork the run)"
		w.state[a.ID] = wsDead
		w.failed(a.ID, false)
	case startAwait:
		st.Outcome, st.Approval = PreviewRuns, &g
		why := cmpOr(g.Rule, g.Why)
		if g.Budget != "" {
			why = g.Why // the budget, its usage and limit
		}
		st.Why += fmt.Sprintf("it would run once %d %s approved it (%s)", g.Need, plural(g.Need, "person", "people"), why)
		w.state[a.ID] = wsHeld
	default:
		st.Outcome = PreviewRuns
		st.Why += "it would run"
		w.state[a.ID] = wsThrough
		attempt := 1
		if rec != nil {
			attempt = rec.Attempt + 1
		}
		n.row.Status, n.row.Key, n.row.Attempts, n.row.Args = ledger.StatusClaimed, st.Key, attempt, resolved
		for _, c := range bc.charges {
			amt, err := ledger.ParseAmount(c.Amount)
			if err != nil {
				continue
			}
			if w.pending[c.Bucket()] == nil {
				w.pending[c.Bucket()] = new(big.Rat)
			}
			w.pending[c.Bucket()].Add(w.pending[c.Bucket()], amt)
		}
	}
	return nil
}

// startWhy begins the reason of a preview step decided v with key record
// rec (nil: a new key).
func startWhy(rec *ledger.KeyRecord, v startVerdict) string {
	switch {
	case rec == nil:
		return "a new key (its arguments changed, or it is new): "
	case v == startKeep:
		return ""
	}
	return fmt.Sprintf("its key is %s: ", rec.State)
}

// runInput is the run as the policy sees it for action id of tool spec
// when the replay reaches it: its totals count the actions started before
// it (the walk's rows, as the drive's would be by then).
func (w *previewWalk) runInput(id string, spec tools.Spec) policy.Run {
	rows := make([]ledger.Action, 0, len(w.d.nodes))
	for _, n := range w.d.nodes {
		rows = append(rows, n.row)
	}
	return w.e.runInput(w.run, spec, rows, id)
}

// failed notes that the replay fails at action id (the first such action
// decides; denied: a rejection, after which nothing is compensated).
func (w *previewWalk) failed(id string, denied bool) {
	if w.failAt == "" {
		w.failAt, w.rejected = id, denied
	}
}

// finish is the drive's finish on the walked revision: when the replay
// fails, what was never started is skipped, except an action whose key
// succeeded before (linkEarlier links it: it keeps its output), and what
// succeeded is undone by its compensation unless the failure is a denial.
func (w *previewWalk) finish(ctx context.Context, order []string, actions map[string]plan.Action) error {
	if w.failAt == "" {
		return nil
	}
	failure := fmt.Sprintf("the replay fails at %s (%s)", w.failAt, w.steps[w.failAt].Outcome)
	for _, id := range order {
		st, a := w.steps[id], actions[id]
		if w.state[id] != wsHeld || st.Outcome == PreviewReview {
			continue
		}
		key, out, ok, err := w.earlier(ctx, a)
		if err != nil {
			return err
		}
		if ok {
			st.Outcome, st.Key, st.Approval = PreviewKeeps, key, nil
			st.Why = fmt.Sprintf("not started, as %s; its key succeeded before, so it keeps that output", failure)
			w.outputs[id] = out
			w.state[id] = wsThrough
			continue
		}
		// Key and Approval stay: what it would have been sent under, and
		// whom it would have waited for.
		why := "not started: " + failure
		if st.Outcome == PreviewRuns && st.Approval != nil {
			why += "; until then it waits for approval (" + st.Why + ")"
		}
		st.Outcome, st.Why = PreviewSkipped, why
		w.state[id] = wsDead
	}
	if w.rejected {
		return nil
	}
	for _, id := range order {
		st := w.steps[id]
		if st.Outcome != PreviewKeeps && (st.Outcome != PreviewRuns || st.Approval != nil) {
			continue
		}
		if spec := w.d.nodes[id].spec; spec.Compensate != nil {
			st.Undone = true
			st.Why += fmt.Sprintf("; then undone by its compensation (%s), as %s", spec.Compensate.Tool, failure)
		}
	}
	return nil
}

// earlier is linkEarlier's test for one action: its arguments resolve from
// the outputs known and its key succeeded before in this run.
func (w *previewWalk) earlier(ctx context.Context, a plan.Action) (key string, out json.RawMessage, ok bool, err error) {
	refs, err := plan.Refs(a.Args)
	if err != nil {
		return "", nil, false, nil
	}
	for _, r := range refs {
		if _, known := w.outputs[r.Action]; !known {
			return "", nil, false, nil
		}
	}
	resolved, err := plan.Resolve(a.Args, w.outputs)
	if err != nil {
		return "", nil, false, nil
	}
	if key, err = plan.Key(w.run.ID, a.ID, a.Tool, resolved); err != nil {
		return "", nil, false, nil
	}
	rec, err := w.e.led.Key(ctx, key)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return "", nil, false, nil
	case err != nil:
		return "", nil, false, fmt.Errorf("executor: preview: action %s: read key: %w", a.ID, err)
	}
	if rec.State != ledger.StatusSucceeded || rec.RunID != w.run.ID || rec.ActionID != a.ID {
		return "", nil, false, nil
	}
	return key, rec.Output, true, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
