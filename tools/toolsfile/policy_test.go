package toolsfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/tools/policy"
)

func TestPolicyParsed(t *testing.T) {
	t.Parallel()
	f, err := Load("testdata/valid/policy.json", testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Policy) != 1 || f.Policy[0].Name != "no-crypto" || f.Policy[0].Outcome != policy.Deny || f.Policy[0].Where != "policy[0]" {
		t.Fatalf("global rules: %+v", f.Policy)
	}
	rules := f.Tools[0].Spec.Policy
	if len(rules) != 2 {
		t.Fatalf("tool rules: %+v", rules)
	}
	r := rules[1]
	if r.Name != "four-eyes" || r.Outcome != policy.Approve || r.Approvers != 2 || !r.ExcludeCreator || r.TTL != time.Hour ||
		len(r.ApproverNames) != 1 || r.Where != `tool "pay" policy[1]` {
		t.Fatalf("rule: %+v", r)
	}
	d := policy.Eval(rules, policy.Input{Tool: "pay", Args: []byte(`{"amount": 1000.01, "currency": "EUR"}`)})
	if d.Outcome != policy.Approve || d.Rule != "four-eyes" {
		t.Fatalf("decision %+v", d)
	}
}

// A rule that does not compile is a tools-file problem with the tool, the
// rule's place and CEL's column; every problem is listed at once.
func TestPolicyProblems(t *testing.T) {
	t.Parallel()
	src := `{"version": 1,
 "policy": [{"when": "action.args.amount >", "outcome": "deny"}],
 "tools": [
  {"name": "pay", "effect": "keyed", "key_header": "K", "input_schema": {"type": "object"},
   "request": {"method": "POST", "url": "https://pay.example.com"},
   "policy": [
     {"when": "true", "outcome": "allow"},
     {"when": "action.argz.amount > 1", "outcome": "approve", "approvers": 0},
     {"when": "true", "outcome": "later", "extra": 1}
   ]}]}`
	_, err := Parse([]byte(src), testEnv(nil))
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want *LoadError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"policy[0].when: ERROR: <input>:1:21: Syntax error",
		`tool "pay": policy[1].approvers: must be a whole number of at least 1`,
		`tool "pay": policy[2].extra: unknown field`,
		`tool "pay": policy[2].outcome: must be "allow", "approve" or "deny"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
}

func TestLoadPolicyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.json")
	os.WriteFile(good, []byte(`{"version": 1, "policy": [{"name": "weekend", "when": "now.getDayOfWeek() == 0", "outcome": "deny"}]}`), 0o600)
	f, err := LoadPolicy(good)
	if err != nil || len(f.Rules) != 1 || f.Rules[0].Where != good+" policy[0]" {
		t.Fatalf("%+v %v", f, err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"version": 1, "policy": [{"when": "run.goal +", "outcome": "deny"}]}`), 0o600)
	_, err = LoadPolicy(bad)
	if err == nil || !strings.Contains(err.Error(), "policy[0].when: ERROR: <input>:1:11") || !strings.Contains(err.Error(), bad) {
		t.Fatalf("got %v", err)
	}
}

// approver_groups is read on rules and budgets, and a wrong one is a
// problem at its place.
func TestApproverGroupsParsed(t *testing.T) {
	t.Parallel()
	src := `{"version": 1,
 "tools": [{"name": "pay", "effect": "keyed", "key_header": "K", "input_schema": {"type": "object"},
   "request": {"method": "POST", "url": "https://pay.example.com"},
   "policy": [{"name": "finance", "when": "true", "outcome": "approve", "approver_groups": ["finance", "treasury"]}]}],
 "budgets": [{"name": "spend", "tools": ["pay"], "limit": 10, "sum": "amount", "outcome": "approve", "approver_groups": ["finance"]}]}`
	f, err := Parse([]byte(src), testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Tools[0].Spec.Policy[0]; strings.Join(r.ApproverGroups, ",") != "finance,treasury" {
		t.Fatalf("rule %+v", r)
	}
	if b := f.Budgets[0]; strings.Join(b.ApproverGroups, ",") != "finance" {
		t.Fatalf("budget %+v", b)
	}
	bad := strings.NewReplacer(`["finance", "treasury"]`, `"finance"`, `"approver_groups": ["finance"]}]}`, `"approver_groups": ["fin ance"]}]}`).Replace(src)
	_, err = Parse([]byte(bad), testEnv(nil))
	for _, want := range []string{
		`tool "pay": policy[0].approver_groups: must be an array of group names`,
		`budgets[0].approver_groups: group "fin ance": a letter`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}
