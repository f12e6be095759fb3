package executor

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

// The policy gate: the rules of the tools file (each tool's, then the
// tools file's approval/approve_above as a built-in rule, then the global
// ones: Config.Policy), evaluated on the action with its resolved arguments
// before its claim, decide whether it runs (allow), waits for N people
// (approve) or never runs (deny). When no rule applies, the run's approval
// policy (--approve) decides as it always did. The decision is recorded on
// the row (ledger.Decide: the gate, event action.policy) and with the claim
// (event action.claimed: "rule", "approved_by").

// deniedPrefix starts the reason recorded on an action the policy denied.
const deniedPrefix = "denied by policy"

// rules lists the rules that apply to spec's calls, in order. The slice
// is only read: with neither a rule of the tool's own nor an approval in
// the tools file, it is the shared one of the registry and Config.
func (e *Engine) rules(spec tools.Spec) []policy.Rule {
	approval := spec.Approval.Always || len(spec.Approval.Above) > 0
	global := e.reg.Policy()
	switch {
	case len(spec.Policy) == 0 && !approval && len(e.cfg.Policy) == 0:
		return global
	case len(spec.Policy) == 0 && !approval && len(global) == 0:
		return e.cfg.Policy
	}
	rules := make([]policy.Rule, 0, len(spec.Policy)+1+len(global)+len(e.cfg.Policy))
	rules = append(rules, spec.Policy...)
	if approval {
		rules = append(rules, approvalRule(spec))
	}
	rules = append(rules, global...)
	return append(rules, e.cfg.Policy...)
}

// approvalRule is the tools file's approval or approve_above of spec's
// tool as a rule.
func approvalRule(spec tools.Spec) policy.Rule {
	return policy.Rule{Name: "tools file approval", Where: fmt.Sprintf("tool %q approval", spec.Name),
		Outcome: policy.Approve, Approvers: 1,
		Func: func(args json.RawMessage) (bool, string) { return tools.NeedsApproval(spec, args) }}
}

// gateFor evaluates the policy for one action. planned: the args are as
// planned (references may be unresolved), so a rule that cannot be
// evaluated yet asks for a person instead of denying; the gate is decided
// again, on the resolved args, before the claim.
func (e *Engine) gateFor(pol Policy, spec tools.Spec, in policy.Input, planned bool) ledger.Gate {
	in.Tool, in.Class = spec.Name, string(spec.Class)
	in.Now = e.clock.Now()
	d := policy.Eval(e.rules(spec), in)
	g := ledger.Gate{Rule: d.Rule, Outcome: string(d.Outcome), Why: d.Why, Message: d.Message}
	switch {
	case d.Matched && d.Outcome == policy.Deny:
		if planned && d.Err != "" && strings.Contains(string(in.Args), "${") {
			g.Outcome, g.Need = string(policy.Approve), 1
			g.Why = "a rule cannot be evaluated until references resolve (" + d.Err + "); decided again before the call"
		}
	case d.Matched && d.Outcome == policy.Approve:
		g.Need, g.Names, g.ExcludeCreator, g.TTL = max(d.Approvers, 1), d.ApproverNames, d.ExcludeCreator, d.TTL
		g.Groups = d.ApproverGroups
	case d.Matched && d.Outcome == policy.Allow:
		if pol == PolicyNone {
			g.Need, g.Why = 1, g.Why+"; the run's policy none asks a person for every action"
		}
	default:
		need, why := needsPerson(pol, spec)
		g = ledger.Gate{Outcome: string(policy.Allow), Why: why}
		if need {
			g.Outcome, g.Need = string(policy.Approve), 1
		}
	}
	return g
}

// needsPerson is the run's approval policy when no rule applies (none:
// always; all: never; safe, the default: at-most-once tools), and why.
func needsPerson(pol Policy, spec tools.Spec) (bool, string) {
	switch pol {
	case PolicyNone:
	case PolicyAll:
		return false, fmt.Sprintf("policy %s", pol)
	default:
		if spec.Class != tools.AtMostOnce {
			return false, fmt.Sprintf("policy %s", pol)
		}
	}
	return true, fmt.Sprintf("policy %s", pol)
}

// deniedReason is what a denied action records and the model is told.
func deniedReason(g ledger.Gate) string {
	msg := g.Message
	if msg == "" {
		msg = "the call is not allowed"
	}
	return fmt.Sprintf("%s (rule %s): %s", deniedPrefix, g.Rule, msg)
}

func gateEqual(a *ledger.Gate, b ledger.Gate) bool {
	if a == nil {
		return false
	}
	x, y := *a, b
	return x.Rule == y.Rule && x.Outcome == y.Outcome && x.Need == y.Need && strings.Join(x.Names, "\x00") == strings.Join(y.Names, "\x00") &&
		strings.Join(x.Groups, "\x00") == strings.Join(y.Groups, "\x00") &&
		x.ExcludeCreator == y.ExcludeCreator && x.TTL == y.TTL && x.Message == y.Message && x.Why == y.Why && x.Budget == y.Budget
}

// readsRun reports whether any of rules may read the run's variables: a CEL
// condition can only reach them by naming run, so a condition without that
// word never sees run.totals (built-in rules see only the arguments).
func readsRun(rules []policy.Rule) bool {
	for _, r := range rules {
		if strings.Contains(r.When, "run") {
			return true
		}
	}
	return false
}

// runInput is run as the policy sees it for action skip of tool spec, the
// run's rows being rows: its totals are summed (O(rows)) only when one of
// the rules that apply to spec can read the run.
func (e *Engine) runInput(run ledger.Run, spec tools.Spec, rows []ledger.Action, skip string) policy.Run {
	r := policy.Run{ID: run.ID, Goal: run.Goal, Creator: run.CreatedBy, Revision: run.Revision}
	if readsRun(e.rules(spec)) {
		r.Totals = totals(rows, skip)
	}
	return r
}

// totals sums, per tool, the actions of rows that were claimed in this
// revision (count, and the numeric top-level arguments), except skip.
func totals(rows []ledger.Action, skip string) map[string]policy.Total {
	out := map[string]policy.Total{}
	sums := map[string]map[string]*big.Rat{}
	for _, r := range rows {
		if r.ID == skip || !r.CountsInTotals() {
			continue // not started; failed definitely, skipped, compensated: no effect to count
		}
		t := out[r.Tool]
		t.Count++
		out[r.Tool] = t
		args, err := tools.DecodeJSON(r.Args)
		if err != nil {
			continue
		}
		obj, _ := args.(map[string]any)
		for k, v := range obj {
			n, ok := v.(json.Number)
			if !ok {
				continue
			}
			d, err := policy.ParseDecimal(string(n))
			if err != nil {
				continue
			}
			if sums[r.Tool] == nil {
				sums[r.Tool] = map[string]*big.Rat{}
			}
			if sums[r.Tool][k] == nil {
				sums[r.Tool][k] = new(big.Rat)
			}
			sums[r.Tool][k].Add(sums[r.Tool][k], d.Rat())
		}
	}
	for tool, m := range sums {
		t := out[tool]
		t.Sums = map[string]string{}
		for k, r := range m {
			d, _ := policy.ParseDecimal(ratString(r))
			t.Sums[k] = d.String()
		}
		out[tool] = t
	}
	return out
}

// ratString writes a sum of decimals as a decimal.
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	for n := 1; n < 400; n++ {
		s := r.FloatString(n)
		if back, ok := new(big.Rat).SetString(s); ok && back.Cmp(r) == 0 {
			return s
		}
	}
	return r.FloatString(400)
}
