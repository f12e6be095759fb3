package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
	"github.com/docketrun/docket/ui"
)

// budgetFile writes the demo world's tools file with a daily budget on
// invoices per tenant and currency (past 1000 EUR a person who did not
// create the run approves).
func (b *bundle) budgetFile(t *testing.T) {
	t.Helper()
	b.withBudgets(t, map[string]any{"name": "daily-invoices", "tools": []any{"payments_create_invoice"}, "per": "tenant",
		"window": "24h", "sum": "amount", "group_by": "currency", "limit": "1000.00", "outcome": "approve", "exclude_creator": true,
		"message": "over the daily invoice budget"})
}

// withBudgets writes the demo world's tools file with these budgets.
func (b *bundle) withBudgets(t *testing.T, budgets ...any) {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal(b.world.ToolsFile(demoworld.ToolsOptions{Timeout: "1s"}), &f); err != nil {
		t.Fatal(err)
	}
	f["budgets"] = budgets
	raw, _ := json.Marshal(f)
	if err := os.WriteFile(b.tools, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestBudgetsCLI: invoices within the budget run; the one that passes it
// waits (exit 3) until someone other than its creator approves; docket
// budgets shows the usage, exactly, as a table and as JSON; tools check
// lists the budget and refuses a bad one with its place (exit 2).
func TestBudgetsCLI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.budgetFile(t)
	invoice := func(id, amount string) string {
		return b.plan(t, id, `{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
			"args": {"customer": "c_1", "amount": `+amount+`, "currency": "EUR", "reference": "`+id+`"}}]}`)
	}
	wantCode(t, inproc(t, b.runArgs(invoice("b1", "600"), "--run-id", "b1", "--approve", "all", "--as", "alice")...), 0)
	wantCode(t, inproc(t, b.runArgs(invoice("b2", "400"), "--run-id", "b2", "--approve", "all", "--as", "alice")...), 0)
	r := inproc(t, b.runArgs(invoice("b3", "1"), "--run-id", "b3", "--approve", "all", "--as", "alice")...)
	wantCode(t, r, 3)
	if n := invoices(b.world); n != 2 {
		t.Fatalf("%d invoices, want 2 (the third waits)", n)
	}
	wantCode(t, inproc(t, "approve", "--data", b.data, "--tools", b.tools, "--as", "alice", "b3", "pay"), 2)
	wantCode(t, inproc(t, "approve", "--data", b.data, "--tools", b.tools, "--as", "bob", "b3", "pay"), 0)
	if n := invoices(b.world); n != 3 {
		t.Fatalf("%d invoices, want 3", n)
	}

	r = inproc(t, "budgets", "--data", b.data)
	wantCode(t, r, 0)
	for _, want := range []string{"BUDGET", "daily-invoices", "tenant:cli:alice", "EUR", "1001", "1000", "-1"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	r = inproc(t, "budgets", "--data", b.data, "--json")
	wantCode(t, r, 0)
	var list ui.BudgetList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Budgets) != 1 || list.Budgets[0].Used != "1001" || list.Budgets[0].Count != 3 {
		t.Fatalf("budgets --json: %+v %v\n%s", list, err, r.stdout)
	}

	r = inproc(t, "tools", "check", "--tools", b.tools)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "daily-invoices: sum of amount of payments_create_invoice at most 1000 per tenant per 24h0m0s per currency; beyond: approve by 1, not the run's creator") {
		t.Fatalf("tools check:\n%s", r.stdout)
	}
	raw, _ := os.ReadFile(b.tools)
	bad := strings.Replace(string(raw), `"limit":"1000.00"`, `"limit":"lots"`, 1)
	if err := os.WriteFile(b.tools, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	r = inproc(t, "tools", "check", "--tools", b.tools)
	wantCode(t, r, 2)
	if !strings.Contains(r.stderr, "budgets[0].limit: must be a decimal number") {
		t.Fatalf("bad budget:\n%s", r.stderr)
	}
}

// TestReplayDryRunBudgets: docket replay --dry-run names the budget that
// would gate a new action (its usage and limit), counting what the
// replay's earlier new actions would take, and records nothing.
func TestReplayDryRunBudgets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.budgetFile(t)
	inv := func(id, amount string) string {
		return `{"id": "` + id + `", "tool": "payments_create_invoice", "args": {"customer": "c_1", "amount": ` + amount + `, "currency": "EUR", "reference": "` + id + `"}}`
	}
	p := b.plan(t, "first", `{"goal": "invoice", "actions": [`+inv("i1", "700")+`]}`)
	wantCode(t, inproc(t, b.runArgs(p, "--run-id", "dryb", "--approve", "all", "--as", "alice")...), 0)
	next := b.plan(t, "next", `{"goal": "invoice", "actions": [`+inv("i1", "700")+`, `+inv("i2", "300")+`, `+inv("i3", "1")+`]}`)
	r := inproc(t, "replay", "--data", b.data, "--tools", b.tools, "--plan", next, "--dry-run", "--as", "alice", "dryb")
	wantCode(t, r, 0)
	var out struct {
		Actions []struct {
			ActionID string `json:"action_id"`
			Outcome  string `json:"outcome"`
			Why      string `json:"why"`
			Approval *struct {
				Budget string `json:"budget"`
			} `json:"approval"`
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Actions) != 3 {
		t.Fatalf("%v\n%s", err, r)
	}
	if a := out.Actions[1]; a.Outcome != "runs" || a.Approval != nil {
		t.Fatalf("i2 (within the budget): %+v", a)
	}
	if a := out.Actions[2]; a.Outcome != "runs" || a.Approval == nil || a.Approval.Budget != "daily-invoices" || !strings.Contains(a.Why, "1000 used + 1 > limit 1000") {
		t.Fatalf("i3 (past the budget): %+v", a)
	}
	if n := invoices(b.world); n != 1 {
		t.Fatalf("%d invoices after a dry run", n)
	}
}
