package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools/policy"
)

// Replay preview: what Replay with a plan would do, before anything is
// recorded (docket replay --dry-run).

// What a preview says of an action.
const (
	PreviewKeeps   = "keeps"   // its key succeeded before: the recorded output is reused, nothing runs
	PreviewRuns    = "runs"    // a new key (or one with no outcome yet): it would run
	PreviewFollows = "follows" // it refers to the output of an action that runs: known once that ran
	PreviewDenied  = "denied"  // the policy denies it: the replay would fail there
)

// PreviewStep is one action of a previewed replay.
type PreviewStep struct {
	ActionID string `json:"action_id"`
	Tool     string `json:"tool"`
	Outcome  string `json:"outcome"` // PreviewKeeps, PreviewRuns, PreviewFollows, PreviewDenied
	Key      string `json:"key,omitempty"`
	// Approval is the policy's decision when people must approve the call
	// before it runs (its rule, how many, who may), or the deny. When a
	// budget would be exceeded (counting what the replay's earlier new
	// actions would reserve first), its outcome is the decision and
	// Approval.Budget names it.
	Approval *ledger.Gate `json:"approval,omitempty"`
	Why      string       `json:"why"`
}

// PreviewReplay says, for each action of p in plan order, whether a replay
// of run runID with p would reuse its recorded output, run it (and whether
// people would have to approve it again), or could only tell once an
// earlier action ran. A new key is measured against its tool's budgets on
// the recorded usage plus what the replay's earlier new actions would
// reserve: an action a budget would gate says so (Approval.Budget).
// Nothing is recorded.
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
	pol := Policy(run.Policy)
	if !pol.valid() {
		pol = PolicySafe
	}
	outputs := map[string]json.RawMessage{}
	pending := map[string]*big.Rat{} // budget buckets: what earlier new actions would reserve
	steps := make(map[string]*PreviewStep, len(p.Actions))
	// Plan order may put a dependent first: go round until nothing changes.
	for pass := 0; pass <= len(p.Actions); pass++ {
		progress := false
		for _, a := range p.Actions {
			if st := steps[a.ID]; st != nil && st.Outcome != PreviewFollows {
				continue
			}
			st, err := e.previewOne(ctx, run, pol, a, outputs, pending)
			if err != nil {
				return nil, err
			}
			if old := steps[a.ID]; old == nil || old.Outcome != st.Outcome {
				progress = true
			}
			steps[a.ID] = st
		}
		if !progress {
			break
		}
	}
	out := make([]PreviewStep, 0, len(p.Actions))
	for _, a := range p.Actions {
		out = append(out, *steps[a.ID])
	}
	return out, nil
}

func (e *Engine) previewOne(ctx context.Context, run ledger.Run, pol Policy, a plan.Action, outputs map[string]json.RawMessage, pending map[string]*big.Rat) (*PreviewStep, error) {
	st := &PreviewStep{ActionID: a.ID, Tool: a.Tool}
	t, _ := e.reg.Get(a.Tool) // the plan was validated
	spec := t.Spec()
	refs, err := plan.Refs(a.Args)
	if err != nil {
		return nil, fmt.Errorf("%w: action %s: %w", ErrInvalidPlan, a.ID, err)
	}
	for _, r := range refs {
		if _, ok := outputs[r.Action]; !ok {
			st.Outcome, st.Why = PreviewFollows, fmt.Sprintf("refers to the output of %s, which runs first: known once it ran", r.Action)
			return st, nil
		}
	}
	resolved, err := plan.Resolve(a.Args, outputs)
	if err != nil {
		return nil, fmt.Errorf("executor: preview: action %s: %w", a.ID, err)
	}
	if st.Key, err = plan.Key(run.ID, a.ID, a.Tool, resolved); err != nil {
		return nil, fmt.Errorf("executor: preview: action %s: %w", a.ID, err)
	}
	rec, err := e.led.Key(ctx, st.Key)
	newKey := errors.Is(err, ledger.ErrNotFound)
	switch {
	case err == nil && rec.State == ledger.StatusSucceeded:
		st.Outcome, st.Why = PreviewKeeps, fmt.Sprintf("same key as before: its recorded output (attempt %d) is reused", rec.Attempt)
		outputs[a.ID] = rec.Output
		return st, nil
	case err == nil:
		st.Why = fmt.Sprintf("its key is %s: ", rec.State)
	case errors.Is(err, ledger.ErrNotFound):
		st.Why = "a new key (its arguments changed, or it is new): "
	default:
		return nil, fmt.Errorf("executor: preview: action %s: %w", a.ID, err)
	}
	g := e.gateFor(pol, spec, policy.Input{ActionID: a.ID, Key: st.Key, Args: resolved,
		Run: policy.Run{ID: run.ID, Goal: run.Goal, Creator: run.CreatedBy, Revision: run.Revision + 1}}, false)
	if newKey {
		// Only a key's first claim reserves: an existing key holds its share.
		bc := e.checkBudgets(ctx, run.ID, run.CreatedBy, a.Tool, resolved, pending)
		if bc.gate != nil && stricter(*bc.gate, g) {
			g = *bc.gate
		}
		if g.Outcome != string(policy.Deny) {
			for _, c := range bc.charges {
				amt, err := ledger.ParseAmount(c.Amount)
				if err != nil {
					continue
				}
				if pending[c.Bucket()] == nil {
					pending[c.Bucket()] = new(big.Rat)
				}
				pending[c.Bucket()].Add(pending[c.Bucket()], amt)
			}
		}
	}
	switch {
	case g.Outcome == string(policy.Deny):
		st.Outcome, st.Approval = PreviewDenied, &g
		st.Why += deniedReason(g)
	case g.Need > 0:
		st.Outcome, st.Approval = PreviewRuns, &g
		why := cmpOr(g.Rule, g.Why)
		if g.Budget != "" {
			why = g.Why // the budget, its usage and limit
		}
		st.Why += fmt.Sprintf("it would run once %d %s approved it (%s)", g.Need, plural(g.Need, "person", "people"), why)
	default:
		st.Outcome = PreviewRuns
		st.Why += "it would run"
	}
	return st, nil
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
