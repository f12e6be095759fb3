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
