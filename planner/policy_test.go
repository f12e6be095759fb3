package planner_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools/policy"
)

// The model is told, in the tool's description, what the policy says of its
// calls; a call the policy denies is answered with the rule's message and
// not queued, so the model plans without it.
func TestPlanPolicyAwareness(t *testing.T) {
	t.Parallel()
	_, b := setup(t, planner.Config{},
		toolCalls("", call{"c1", "pay_charge", `{"customer_id":"c_1","amount":900}`}),
		toolCalls("", call{"c2", "mail_send", `{"to":"a@x","subject":"s","body":"ask finance"}`}),
		text("ok"),
	)
	rules := []policy.Rule{
		{Name: "big-charge", Where: "policy[0]", When: "action.tool == 'pay.charge' && action.args.amount > 500", Outcome: policy.Deny, Message: "charges over 500 go through finance"},
		{Name: "two", Where: "policy[1]", When: "action.tool == 'mail/send' && action.args.to.endsWith('@board.example')", Outcome: policy.Approve, Approvers: 2},
	}
	if err := policy.Compile(rules); err != nil {
		t.Fatal(err)
	}
	p, err := planner.New(planner.Config{BaseURL: b.model.srv.URL + "/v1", APIKey: testKey, Model: "gpt-test",
		Tools: b.reg.WithPolicy(rules), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Plan(context.Background(), planner.Request{Goal: "charge c_1 900 and tell them"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.Actions) != 1 || res.Plan.Actions[0].Tool != "mail/send" {
		t.Fatalf("actions %s", mustJSON(t, res.Plan.Actions))
	}
	got := toolResults(t, b.model.requests()[1])["c1"]
	if !strings.Contains(got, "denied by policy (rule big-charge): charges over 500 go through finance") {
		t.Fatalf("the denied call was answered %s", got)
	}
	desc, _ := toolDef(t, b.model.requests()[0], "mail_send")["description"].(string)
	if !strings.Contains(desc, "waits for 2 people to approve it") || !strings.Contains(desc, "is denied (charges over 500 go through finance)") {
		t.Fatalf("mail_send's description does not tell the policy: %q", desc)
	}
}

// The model is told, in the descriptions of the tools a budget counts,
// the budget's name, limit, scope, window and what happens past it; tools
// no budget counts say nothing of budgets. Both modes (tools and the JSON
// schema's tool list) carry it.
func TestPlanBudgetAwareness(t *testing.T) {
	t.Parallel()
	budgets := []policy.Budget{
		{Name: "daily-charges", Where: "budgets[0]", Tools: []string{"pay.charge"}, Per: policy.PerTenant, Window: 24 * time.Hour,
			Sum: "amount", GroupBy: "currency", Limit: "5000.00", Outcome: policy.Approve, Approvers: 2, Message: "finance looks first"},
		{Name: "mails", Where: "budgets[1]", Tools: []string{"mail/send", "pay.charge"}, Per: policy.PerRun, Window: 90 * time.Minute,
			Limit: "3", Outcome: policy.Deny},
	}
	if err := policy.CheckBudgets(budgets, nil); err != nil {
		t.Fatal(err)
	}
	wantCharge := []string{
		"Budgets (checked before it runs, not by you): daily-charges: at most 5000 of amount summed per requester (whoever created the run) and per value of currency per 24h (UTC); past it a call waits for 2 people to approve it (finance looks first)",
		"mails: at most 3 calls over the calls of mail/send, pay.charge per run per 1h30m (UTC); past it a call is denied.",
	}
	_, b := setup(t, planner.Config{}, text("nothing to do"))
	p, err := planner.New(planner.Config{BaseURL: b.model.srv.URL + "/v1", APIKey: testKey, Model: "gpt-test",
		Tools: b.reg.WithBudgets(budgets), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Plan(context.Background(), planner.Request{Goal: "nothing"}); err != nil {
		t.Fatal(err)
	}
	req := b.model.requests()[0]
	charge, _ := toolDef(t, req, "pay_charge")["description"].(string)
	for _, w := range wantCharge {
		if !strings.Contains(charge, w) {
			t.Errorf("pay_charge's description lacks %q:\n%s", w, charge)
		}
	}
	if mail, _ := toolDef(t, req, "mail_send")["description"].(string); strings.Contains(mail, "daily-charges") || !strings.Contains(mail, "mails: at most 3 calls") {
		t.Errorf("mail_send's description: %s", mail)
	}
	if crm, _ := toolDef(t, req, "crm_create_contact")["description"].(string); strings.Contains(crm, "Budgets") {
		t.Errorf("a tool no budget counts mentions budgets: %s", crm)
	}

	_, bj := setup(t, planner.Config{}, text(`{"actions": []}`))
	pj, err := planner.New(planner.Config{BaseURL: bj.model.srv.URL + "/v1", APIKey: testKey, Model: "gpt-test", Mode: planner.ModeJSONSchema,
		Tools: bj.reg.WithBudgets(budgets), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pj.Plan(context.Background(), planner.Request{Goal: "nothing"}); err != nil {
		t.Fatal(err)
	}
	if sys := mustJSON(t, bj.model.requests()[0].body["messages"]); !strings.Contains(sys, "daily-charges: at most 5000 of amount summed") {
		t.Errorf("the JSON mode's tool list lacks the budget: %s", sys)
	}
}
