package executor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
	"github.com/docketrun/docket/tools/tooltest"
)

// budgetSetup: a keyed "pay" tool under a daily budget per tenant and
// currency (approve past 1000.10 EUR-equivalent, not by the creator) and
// an idempotent "note" tool under a count budget per run (deny past 2).
func budgetSetup(t *testing.T) *bundle {
	t.Helper()
	budgets := []policy.Budget{
		{Name: "daily-spend", Where: "budgets[0]", Tools: []string{"pay"}, Per: policy.PerTenant, Window: 24 * time.Hour,
			Sum: "amount", GroupBy: "currency", Limit: "1000.10", Outcome: policy.Approve, ExcludeCreator: true, Message: "over the daily budget"},
		{Name: "notes-per-run", Where: "budgets[1]", Tools: []string{"note"}, Per: policy.PerRun, Limit: "2", Outcome: policy.Deny, Message: "two notes per run"},
	}
	if err := policy.CheckBudgets(budgets, nil); err != nil {
		t.Fatal(err)
	}
	b := setup(t, nil)
	b.useTools(budgets, b.world.Tool(spec("pay", tools.Keyed)), b.world.Tool(spec("note", tools.Idempotent)))
	return b
}

func (b *bundle) bucket(budget, scope, group string) ledger.BudgetRecord {
	b.t.Helper()
	all, err := b.led.(ledger.BudgetReader).Budgets(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	for _, r := range all {
		if r.Budget == budget && r.Scope == scope && r.Group == group {
			return r
		}
	}
	return ledger.BudgetRecord{}
}

func claimEvent(b *bundle, runID, actionID string) string {
	var out string
	for _, ev := range b.events(runID) {
		if ev.Type == ledger.EventActionClaimed && ev.ActionID == actionID {
			out = string(ev.Data)
		}
	}
	return out
}

// Budgets: reserved exactly with each claim, per tenant and currency; past
// the limit the budget's outcome decides (approve by another person; deny),
// named in the gate and the events; a definite failure gives the amount
// back; a missing amount denies (fail closed).
func TestBudgets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := budgetSetup(t)
	pay := func(runID, args, creator string) ledger.RunDoc {
		return b.runAs(runID, mkPlan(t, pa("p", "pay", args)), PolicySafe, creator)
	}
	wantStatus(t, pay("r1", `{"amount": 600.05, "currency": "EUR"}`, "token:alice"), ledger.RunCompleted)
	wantStatus(t, pay("r2", `{"amount": 400.05, "currency": "EUR"}`, "token:alice"), ledger.RunCompleted)
	if u := b.bucket("daily-spend", "tenant:token:alice", "EUR"); u.Used != "1000.1" || u.Count != 2 {
		t.Fatalf("usage %+v, want exactly 1000.1 over 2 actions", u)
	}
	if ev := claimEvent(b, "r2", "p"); !strings.Contains(ev, `"budget":"daily-spend"`) || !strings.Contains(ev, `"used":"1000.1"`) {
		t.Fatalf("claim event %s does not name the budget", ev)
	}
	// Another tenant and another currency have their own usage.
	wantStatus(t, pay("r3", `{"amount": 900, "currency": "EUR"}`, "token:carol"), ledger.RunCompleted)
	wantStatus(t, pay("r4", `{"amount": 5, "currency": "USD"}`, "token:alice"), ledger.RunCompleted)

	// One cent more waits for a person, under the budget's rule.
	args := `{"amount": 0.01, "currency": "EUR"}`
	doc := pay("r5", args, "token:alice")
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	a := wantAction(t, doc, "p", ledger.StatusPending)
	if a.Gate == nil || a.Gate.Rule != "budget daily-spend" || !strings.Contains(a.Gate.Why, "1000.1 used + 0.01 > limit 1000.1") {
		t.Fatalf("gate %+v", a.Gate)
	}
	if err := b.eng.Approve(ctx, "r5", []string{"p"}, "token:alice"); err == nil {
		t.Fatal("the creator approved past her own budget")
	}
	if err := b.eng.Approve(ctx, "r5", []string{"p"}, "token:bob"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, b.resume("r5"), ledger.RunCompleted)
	if u := b.bucket("daily-spend", "tenant:token:alice", "EUR"); u.Used != "1000.11" || u.Count != 3 {
		t.Fatalf("usage after the approved claim %+v", u)
	}
	if ev := claimEvent(b, "r5", "p"); !strings.Contains(ev, `"over":true`) || !strings.Contains(ev, `"approved_by":["token:bob"]`) {
		t.Fatalf("claim event %s", ev)
	}

	// A definite failure gives the amount back.
	b.world.FaultFunc = func(tool string, call tools.Call, n int) tooltest.Fault {
		if strings.Contains(string(call.Args), "77") {
			return tooltest.Reject
		}
		return tooltest.NoFault
	}
	wantStatus(t, pay("r6", `{"amount": 77, "currency": "USD"}`, "token:alice"), ledger.RunFailed)
	if u := b.bucket("daily-spend", "tenant:token:alice", "USD"); u.Used != "5" || u.Count != 1 {
		t.Fatalf("usage after a definite failure %+v, want 5 (released)", u)
	}
	b.world.FaultFunc = nil

	// A missing amount denies, failing closed.
	doc = pay("r7", `{"currency": "EUR"}`, "token:dave")
	wantStatus(t, doc, ledger.RunFailed)
	if a := wantAction(t, doc, "p", ledger.StatusRejected); !strings.Contains(a.Error, "budget daily-spend") || !strings.Contains(a.Error, "amount is missing") &&
		!strings.Contains(a.Gate.Why, "amount is missing") {
		t.Fatalf("denied action %+v gate %+v", a, a.Gate)
	}

	// The count budget denies the third note of a run, with its message.
	doc = b.runAs("r8", mkPlan(t, pa("n1", "note", `{"i": 1}`), pa("n2", "note", `{"i": 2}`, "n1"), pa("n3", "note", `{"i": 3}`, "n2")), PolicySafe, "token:alice")
	wantStatus(t, doc, ledger.RunFailed)
	wantAction(t, doc, "n2", ledger.StatusSucceeded)
	if a := wantAction(t, doc, "n3", ledger.StatusRejected); !strings.Contains(a.Error, "rule budget notes-per-run") || !strings.Contains(a.Error, "two notes per run") {
		t.Fatalf("third note %+v", a)
	}
	if k := keyOf(t, "r8", "n3", "note", `{"i": 3}`); b.world.Effects(k) != 0 {
		t.Fatal("the denied note ran")
	}
	var policyEv json.RawMessage
	for _, ev := range b.events("r8") {
		if ev.Type == ledger.EventActionPolicy && ev.ActionID == "n3" {
			policyEv = ev.Data
		}
	}
	if !strings.Contains(string(policyEv), `"rule":"budget notes-per-run"`) {
		t.Fatalf("policy event %s", policyEv)
	}
}

// A budget's approver_groups: past the limit, only a member of the group
// (by the groups its approval records) approves; a non-member is refused
// naming the group, and the drive counts only the member.
func TestBudgetApproverGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	budgets := []policy.Budget{{Name: "spend", Where: "budgets[0]", Tools: []string{"pay"}, Per: policy.PerRun, Sum: "amount",
		Limit: "10", Outcome: policy.Approve, ApproverGroups: []string{"finance"}}}
	if err := policy.CheckBudgets(budgets, nil); err != nil {
		t.Fatal(err)
	}
	b := setup(t, nil)
	b.useTools(budgets, b.world.Tool(spec("pay", tools.Keyed)))
	doc := b.runAs("g1", mkPlan(t, pa("p", "pay", `{"amount": 11}`)), PolicySafe, "token:agent")
	wantStatus(t, doc, ledger.RunAwaitingApproval)
	if a := wantAction(t, doc, "p", ledger.StatusPending); a.Gate == nil || len(a.Gate.Groups) != 1 || a.Gate.Groups[0] != "finance" {
		t.Fatalf("gate %+v", a.Gate)
	}
	err := b.eng.ApproveAs(ctx, "g1", []string{"p"}, ledger.Approver{By: "token:eve", Groups: []string{"sales"}})
	if !errors.Is(err, ledger.ErrApproverRefused) || !strings.Contains(err.Error(), "members of group finance") {
		t.Fatalf("eve (sales): %v", err)
	}
	wantStatus(t, b.resume("g1"), ledger.RunAwaitingApproval)
	if err := b.eng.ApproveAs(ctx, "g1", []string{"p"}, ledger.Approver{By: "token:fred", Groups: []string{"finance"}}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, b.resume("g1"), ledger.RunCompleted)
	if ev := claimEvent(b, "g1", "p"); !strings.Contains(ev, `"approved_by":["token:fred"]`) {
		t.Fatalf("claim event %s", ev)
	}
}

// PreviewReplay tells which new actions a budget would gate: measured on
// the recorded usage plus what the replay's earlier new actions would
// reserve; an unchanged action (its key holds its share) is not counted
// again; a deny budget previews as denied. Nothing is recorded.
func TestPreviewReplayBudgets(t *testing.T) {
	t.Parallel()
	b := budgetSetup(t)
	first := mkPlan(t, pa("p1", "pay", `{"amount": 600, "currency": "EUR"}`), pa("n1", "note", `{"x": 1}`))
	wantStatus(t, b.runAs("r", first, PolicyAll, "token:alice"), ledger.RunCompleted)
	before := len(b.events("r"))
	next := mkPlan(t,
		pa("p1", "pay", `{"amount": 600, "currency": "EUR"}`), // keeps its output
		pa("p2", "pay", `{"amount": 400, "currency": "EUR"}`), // 600 + 400 <= 1000.10
		pa("p3", "pay", `{"amount": 0.2, "currency": "EUR"}`), // 1000 + 0.2 > 1000.10: approve
		pa("p4", "pay", `{"amount": 0.05, "currency": "USD"}`),
		pa("n1", "note", `{"x": 1}`), // keeps
		pa("n2", "note", `{"x": 2}`), // the second note of the run
		pa("n3", "note", `{"x": 3}`)) // the third: denied
	got := b.preview("r", next)
	for _, id := range []string{"p2", "p4", "n2"} {
		if s := got[id]; s.Outcome != PreviewRuns || s.Approval != nil {
			t.Errorf("%s: %+v, want runs without approval", id, s)
		}
	}
	if s := got["p1"]; s.Outcome != PreviewKeeps {
		t.Errorf("p1: %+v", s)
	}
	// n3 is denied: the replay fails there, and p3, waiting for a person
	// to approve going past the budget, is never started.
	if s := got["p3"]; s.Outcome != PreviewSkipped || s.Approval == nil || s.Approval.Budget != "daily-spend" || s.Approval.Need != 1 ||
		!strings.Contains(s.Why, "1000 used + 0.2 > limit 1000.1") {
		t.Errorf("p3: %+v %+v", s, s.Approval)
	}
	if s := got["n3"]; s.Outcome != PreviewDenied || s.Approval == nil || s.Approval.Budget != "notes-per-run" || !strings.Contains(s.Why, "two notes per run") {
		t.Errorf("n3: %+v %+v", s, s.Approval)
	}
	// Without n3, p3 waits for that person.
	next.Actions = next.Actions[:len(next.Actions)-1]
	got = b.preview("r", next)
	if s := got["p3"]; s.Outcome != PreviewRuns || s.Approval == nil || s.Approval.Budget != "daily-spend" || s.Approval.Need != 1 ||
		!strings.Contains(s.Why, "1000 used + 0.2 > limit 1000.1") {
		t.Errorf("p3: %+v %+v", s, s.Approval)
	}
	if n := len(b.events("r")); n != before {
		t.Fatalf("the preview recorded %d events", n-before)
	}
	if u := b.bucket("daily-spend", "tenant:token:alice", "EUR"); u.Used != "600" {
		t.Fatalf("the preview changed the usage: %+v", u)
	}
}
