package executor

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools/policy"
)

// Budgets (tools/policy.Budget, the tools file's "budgets"): before an
// action's first claim the executor measures it against every budget of
// its tool and reads each bucket's usage. When one would pass its limit,
// the budget decides like a rule named "budget NAME": deny (the action is
// rejected, the run fails) or approve (it waits for its approvers; once
// approved, its claim reserves past the limit: Charge.Over). The claim
// carries the charges (ledger.Op.WithCharges), so the ledger reserves them
// in the claim's commit, once per key, and refuses the claim when another
// claim took the room meanwhile (the action is then prepared again and
// decided on the new usage).

// budgetRulePrefix starts the rule name of a budget's decision.
const budgetRulePrefix = "budget "

// budgetCheck is what the budgets of one action decided.
type budgetCheck struct {
	charges []ledger.Charge
	// gate is the strictest exceeded budget's decision (nil: none exceeded).
	gate *ledger.Gate
	// over names the exceeded budgets whose outcome is approve.
	over map[string]bool
}

// checkBudgets measures an action with resolved args against its tool's
// budgets. A measure that fails (a missing or negative amount), or a
// ledger that does not keep budgets, denies (fail closed).
func (d *driver) checkBudgets(ctx context.Context, tool string, args []byte) budgetCheck {
	return d.e.checkBudgets(ctx, d.runID, d.run.CreatedBy, tool, args, nil)
}

// checkBudgets measures an action of tool with resolved args, in run runID
// created by creator, against the tool's budgets. pending, when not nil,
// adds to each bucket's recorded usage what actions not recorded yet would
// reserve first (by Charge.Bucket; a replay preview's earlier actions).
func (e *Engine) checkBudgets(ctx context.Context, runID, creator, tool string, args []byte, pending map[string]*big.Rat) budgetCheck {
	var bc budgetCheck
	var apply []policy.Budget
	for _, b := range e.reg.Budgets() {
		if b.Applies(tool) {
			apply = append(apply, b)
		}
	}
	if len(apply) == 0 {
		return bc
	}
	deny := func(b policy.Budget, why string) budgetCheck {
		return budgetCheck{gate: &ledger.Gate{Rule: budgetRulePrefix + b.Name, Outcome: string(policy.Deny), Message: b.Message, Why: why, Budget: b.Name}}
	}
	br, ok := e.led.(ledger.BudgetReader)
	if !ok {
		return deny(apply[0], "the ledger does not keep budgets")
	}
	now := e.clock.Now()
	for _, b := range apply {
		m, err := b.Measure(args, runID, creator, now)
		if err != nil {
			return deny(b, err.Error())
		}
		c := ledger.Charge{Budget: b.Name, Scope: m.Scope, Window: m.Window, Every: b.Window, Group: m.Group, Amount: m.Amount, Limit: b.Limit}
		bc.charges = append(bc.charges, c)
		used := "0"
		switch rec, err := br.Budget(ctx, c.Bucket()); {
		case err == nil:
			used = rec.Used
		case !errors.Is(err, ledger.ErrNotFound):
			return deny(b, fmt.Sprintf("reading its usage: %v", err))
		}
		if add := pending[c.Bucket()]; add != nil {
			if u, err := ledger.ParseAmount(used); err == nil {
				used = ledger.FormatAmount(new(big.Rat).Add(u, add))
			}
		}
		if !exceeds(used, c.Amount, c.Limit) {
			continue
		}
		g := ledger.Gate{Rule: budgetRulePrefix + b.Name, Outcome: string(b.Outcome), Message: b.Message, Budget: b.Name,
			Why: fmt.Sprintf("budget %s: %s used + %s > limit %s%s", b.Name, used, c.Amount, c.Limit, bucketLabel(c))}
		if b.Outcome == policy.Approve {
			g.Need, g.Names, g.ExcludeCreator, g.TTL = max(b.Approvers, 1), b.ApproverNames, b.ExcludeCreator, b.TTL
			g.Groups = b.ApproverGroups
			if bc.over == nil {
				bc.over = map[string]bool{}
			}
			bc.over[b.Name] = true
		}
		if bc.gate == nil || stricter(g, *bc.gate) {
			bc.gate = &g
		}
	}
	return bc
}

// exceeds reports whether used + amount > limit (exact decimals; an
// unreadable number counts as exceeding: fail closed).
func exceeds(used, amount, limit string) bool {
	u, err1 := ledger.ParseAmount(used)
	a, err2 := ledger.ParseAmount(amount)
	l, err3 := ledger.ParseAmount(limit)
	if err1 != nil || err2 != nil || err3 != nil {
		return true
	}
	return new(big.Rat).Add(u, a).Cmp(l) > 0
}

func bucketLabel(c ledger.Charge) string {
	var parts []string
	parts = append(parts, c.Scope)
	if c.Group != "" {
		parts = append(parts, c.Group)
	}
	if !c.Window.IsZero() {
		parts = append(parts, "window from "+c.Window.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// stricter reports whether gate a is stricter than b: deny over approve,
// approve with more approvers over fewer, approve over allow.
func stricter(a, b ledger.Gate) bool {
	rank := func(g ledger.Gate) int {
		switch g.Outcome {
		case string(policy.Deny):
			return 1 << 20
		case string(policy.Approve):
			return 1 + g.Need
		}
		return 0
	}
	return rank(a) > rank(b)
}

// withOver marks the charges of the exceeded approve budgets as approved
// past their limit (the action's approvals cover them).
func (bc budgetCheck) withOver() []ledger.Charge {
	out := make([]ledger.Charge, len(bc.charges))
	for i, c := range bc.charges {
		c.Over = bc.over[c.Budget]
		out[i] = c
	}
	return out
}
