package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
)

// Budget accounting: the protected workload's tools file declares a budget
// on charges (per run, the sum of amount per currency; its limit is never
// reached, so the workload runs as before). At the end of every run the
// harness reads the ledger's usage (docket budgets --json) and compares it
// with the charges the world saw: a reservation is kept exactly for the
// charges that took effect, except for charges whose outcome is still
// unknown in a run that stopped with them unsettled (kept on an unknown
// outcome, by design: those are added to the world's side).

// BudgetCharges names the protected tools file's budget on charges.
const BudgetCharges = "charges-per-run"

// budgetUsage is the part of `docket budgets --json` the harness reads.
type budgetUsage struct {
	Budgets []struct {
		Budget string `json:"budget"`
		Scope  string `json:"scope"`
		Group  string `json:"group"`
		Used   string `json:"used"`
		Count  int    `json:"count"`
	} `json:"budgets"`
}

// auditBudget compares the ledger's usage of the charges budget for run
// runID (read from data) with the world's charges; it returns findings
// (none when they are equal).
func (h *harness) auditBudget(ctx context.Context, data string, doc *runDoc, w *Audit) ([]string, error) {
	o, err := h.cfg.Docket.spawn(ctx, []string{"budgets", "--json", "--data", data}, kill{})
	if err != nil {
		return nil, err
	}
	var u budgetUsage
	if err := json.Unmarshal(o.stdout, &u); err != nil || o.code != 0 {
		return nil, fmt.Errorf("docket budgets --json: %v: %s", err, o)
	}
	used, count := new(big.Rat), 0
	for _, b := range u.Budgets {
		if b.Budget != BudgetCharges || b.Scope != "run:"+doc.RunID {
			continue
		}
		r, ok := new(big.Rat).SetString(b.Used)
		if !ok {
			return nil, fmt.Errorf("docket budgets --json: used %q is not a decimal", b.Used)
		}
		used.Add(used, r)
		count += b.Count
	}
	return budgetFindings(doc, w, used, count), nil
}

// budgetFindings compares usage (used, count) with the world's charges plus
// the charges of doc whose outcome is unknown and that the world does not
// have.
func budgetFindings(doc *runDoc, w *Audit, used *big.Rat, count int) []string {
	want, n := new(big.Rat), 0
	seen := map[string]bool{}
	for _, c := range w.Charges {
		r, ok := new(big.Rat).SetString(string(c.Amount))
		if !ok {
			return []string{fmt.Sprintf("%s: the world's charge %s has amount %q", doc.RunID, c.ID, c.Amount)}
		}
		want.Add(want, r)
		n++
		seen[c.Reference] = true
	}
	for _, a := range doc.Actions {
		if a.Tool != ToolCharge || (a.Status != "needs_review" && a.Status != "claimed") {
			continue
		}
		var args struct {
			Amount    json.Number `json:"amount"`
			Reference string      `json:"reference"`
		}
		if json.Unmarshal(a.Args, &args) != nil || seen[args.Reference] {
			continue
		}
		if r, ok := new(big.Rat).SetString(string(args.Amount)); ok {
			want.Add(want, r) // unknown outcome: its reservation is kept
			n++
		}
	}
	if used.Cmp(want) == 0 && count == n {
		return nil
	}
	return []string{fmt.Sprintf("%s: budget %s holds %s over %d charges, the world saw %s over %d (with unsettled ones)",
		doc.RunID, BudgetCharges, used.RatString(), count, want.RatString(), n)}
}
