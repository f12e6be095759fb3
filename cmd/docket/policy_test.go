package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
)

// fourEyesFile writes the demo world's tools file with a four-eyes rule on
// invoices over 1000 (two people, never the run's creator) and a global
// deny, and returns its path.
func (b *bundle) fourEyesFile(t *testing.T) {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal(b.world.ToolsFile(demoworld.ToolsOptions{Timeout: "1s"}), &f); err != nil {
		t.Fatal(err)
	}
	for _, tl := range f["tools"].([]any) {
		if tl := tl.(map[string]any); tl["name"] == "payments_create_invoice" {
			tl["policy"] = []any{map[string]any{"name": "four-eyes", "when": "action.args.amount > 1000", "outcome": "approve",
				"approvers": 2, "exclude_creator": true}}
		}
	}
	f["policy"] = []any{map[string]any{"name": "no-usd", "when": `action.tool == "payments_create_invoice" && action.args.currency == "USD"`,
		"outcome": "deny", "message": "invoice in EUR"}}
	raw, _ := json.Marshal(f)
	if err := os.WriteFile(b.tools, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func invoices(w *demoworld.World) int {
	n := 0
	for k, v := range w.Effects() {
		if strings.HasPrefix(k, "payments") {
			n += v
		}
	}
	return n
}

// TestFourEyesCLI: docket run as alice waits (exit 3); alice's approval is
// refused (exit 2); bob's alone leaves it waiting (exit 3); carol's runs it
// (exit 0), once. docket step goes the same way.
func TestFourEyesCLI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fourEyesFile(t)
	p := b.plan(t, "pay", `{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 1200, "currency": "EUR", "reference": "fe"}}]}`)
	wantCode(t, inproc(t, b.runArgs(p, "--run-id", "fe", "--approve", "all", "--as", "alice")...), 3)
	approve := func(as string) result {
		return inproc(t, "approve", "--data", b.data, "--tools", b.tools, "--as", as, "fe", "pay")
	}
	r := approve("alice")
	wantCode(t, r, 2)
	if !strings.Contains(r.stderr, "cli:alice created the run") {
		t.Fatalf("refusal does not say why:\n%s", r)
	}
	wantCode(t, approve("bob"), 3)
	wantCode(t, approve("bob"), 3)
	if n := invoices(b.world); n != 0 {
		t.Fatalf("%d invoices after one approver", n)
	}
	r = approve("carol")
	wantCode(t, r, 0)
	if d := doc(t, r); d.Status != "completed" {
		t.Fatalf("status %s", d.Status)
	}
	if n := invoices(b.world); n != 1 {
		t.Fatalf("%d invoices, want 1", n)
	}

	// A denied call never runs; the run fails saying the rule's message.
	usd := b.plan(t, "usd", `{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 10, "currency": "USD", "reference": "usd"}}]}`)
	r = inproc(t, b.runArgs(usd, "--run-id", "usd", "--approve", "all")...)
	wantCode(t, r, 1)
	if d := doc(t, r); !strings.Contains(d.Error, "rule no-usd") || !strings.Contains(d.Error, "invoice in EUR") || d.action("pay").Status != "rejected" {
		t.Fatalf("denied run: %+v", d)
	}
	if n := invoices(b.world); n != 1 {
		t.Fatalf("%d invoices after a denied one", n)
	}

	// tools check lists the rules; a rule that does not compile is exit 2
	// with its place.
	r = inproc(t, "tools", "check", "--tools", b.tools)
	wantCode(t, r, 0)
	if !strings.Contains(r.stdout, "four-eyes: when action.args.amount > 1000 -> approve by 2, not the run's creator") {
		t.Fatalf("tools check:\n%s", r)
	}
	bad := filepath.Join(b.dir, "bad-policy.json")
	os.WriteFile(bad, []byte(`{"version": 1, "policy": [{"when": "action.args.amount >>", "outcome": "deny"}]}`), 0o600)
	r = inproc(t, "tools", "check", "--tools", b.tools, "--policy", bad)
	wantCode(t, r, 2)
	if !strings.Contains(r.stderr, "policy[0].when: ERROR: <input>:1:") {
		t.Fatalf("bad policy:\n%s", r)
	}
	// A policy file joins the tools hash: the run does not continue under
	// another policy without --accept-tools-change.
	extra := filepath.Join(b.dir, "policy.json")
	os.WriteFile(extra, []byte(`{"version": 1, "policy": [{"name": "weekend", "when": "false", "outcome": "deny"}]}`), 0o600)
	wantCode(t, inproc(t, b.runArgs(b.plan(t, "ch", `{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 2000, "currency": "EUR", "reference": "ch"}}]}`), "--run-id", "ch", "--as", "alice")...), 3)
	r = inproc(t, "approve", "--data", b.data, "--tools", b.tools, "--policy", extra, "--as", "bob", "ch", "pay")
	if r.code != 2 || !strings.Contains(r.stderr, "changed") {
		t.Fatalf("another policy:\n%s", r)
	}
}

// TestFourEyesStep: docket step with the same request continues the run;
// approvals in between come from two people.
func TestFourEyesStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fourEyesFile(t)
	req := `{"run_id": "st", "approve": "all", "plan": {"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 5000, "currency": "EUR", "reference": "st"}}]}}`
	step := func() result {
		return stepInproc(t, req, "--data", b.data, "--tools", b.tools, "--as", "alice")
	}
	wantCode(t, step(), 3)
	wantCode(t, inproc(t, "approve", "--data", b.data, "--tools", b.tools, "--as", "alice", "st", "pay"), 2)
	wantCode(t, inproc(t, "approve", "--data", b.data, "--tools", b.tools, "--as", "bob", "st", "pay"), 3)
	wantCode(t, step(), 3)
	if n := invoices(b.world); n != 0 {
		t.Fatalf("%d invoices", n)
	}
	wantCode(t, inproc(t, "approve", "--data", b.data, "--tools", b.tools, "--as", "carol", "st", "pay"), 0)
	r := step()
	wantCode(t, r, 0)
	if n := invoices(b.world); n != 1 {
		t.Fatalf("%d invoices", n)
	}
}

// TestReplayDryRun: docket replay --dry-run says which actions keep their
// outputs and which would run (and need two people again), and records
// nothing.
func TestReplayDryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fourEyesFile(t)
	p := b.plan(t, "pay", `{"goal": "invoice", "actions": [
		{"id": "pay", "tool": "payments_create_invoice", "args": {"customer": "c_1", "amount": 10, "currency": "EUR", "reference": "dry"}},
		{"id": "price", "tool": "catalogue_price", "args": {"plan": "starter"}}]}`)
	wantCode(t, inproc(t, b.runArgs(p, "--run-id", "dry", "--approve", "all")...), 0)
	next := b.plan(t, "next", `{"goal": "invoice", "actions": [
		{"id": "pay", "tool": "payments_create_invoice", "args": {"customer": "c_1", "amount": 2500, "currency": "EUR", "reference": "dry"}},
		{"id": "price", "tool": "catalogue_price", "args": {"plan": "starter"}}]}`)
	before := inproc(t, "audit", "--data", b.data, "dry").stdout
	r := inproc(t, "replay", "--data", b.data, "--tools", b.tools, "--plan", next, "--dry-run", "dry")
	wantCode(t, r, 0)
	var out struct {
		DryRun  bool `json:"dry_run"`
		Actions []struct {
			ActionID string `json:"action_id"`
			Outcome  string `json:"outcome"`
			Approval *struct {
				Rule string `json:"rule"`
				Need int    `json:"need"`
			} `json:"approval"`
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.DryRun || len(out.Actions) != 2 {
		t.Fatalf("%v\n%s", err, r)
	}
	if a := out.Actions[0]; a.Outcome != "runs" || a.Approval == nil || a.Approval.Rule != "four-eyes" || a.Approval.Need != 2 {
		t.Fatalf("pay: %+v", a)
	}
	if a := out.Actions[1]; a.Outcome != "keeps" {
		t.Fatalf("price: %+v", a)
	}
	if after := inproc(t, "audit", "--data", b.data, "dry").stdout; after != before {
		t.Fatal("the dry run recorded something")
	}
}
