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

const budgetTool = `{"name": "pay", "effect": "keyed", "key_header": "K", "input_schema": {"type": "object"},
   "request": {"method": "POST", "url": "https://pay.example.com"}}`

func TestBudgetsParsed(t *testing.T) {
	t.Parallel()
	src := `{"version": 1, "tools": [` + budgetTool + `],
 "mcp_servers": [{"name": "mail", "command": "mail-mcp"}],
 "budgets": [
  {"name": "daily-spend", "tools": ["pay"], "per": "tenant", "window": "24h", "sum": "amount", "group_by": "currency",
   "limit": 5000.00, "outcome": "approve", "approvers": 2, "exclude_creator": true, "message": "over budget"},
  {"name": "mails", "tools": ["mail.send"], "per": "run", "limit": "3", "outcome": "deny"}
 ]}`
	f, err := Parse([]byte(src), testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Budgets) != 2 {
		t.Fatalf("budgets %+v", f.Budgets)
	}
	b := f.Budgets[0]
	if b.Name != "daily-spend" || b.Window != 24*time.Hour || b.Sum != "amount" || b.GroupBy != "currency" || b.Limit != "5000" ||
		b.Outcome != policy.Approve || b.Approvers != 2 || !b.ExcludeCreator || b.Where != "budgets[0]" {
		t.Fatalf("budget %+v", b)
	}
	if m := f.Budgets[1]; m.Per != policy.PerRun || m.Limit != "3" || m.Sum != "" {
		t.Fatalf("count budget %+v", m)
	}
}

// Every wrong field of a budget is a problem with its place; all at once.
func TestBudgetProblems(t *testing.T) {
	t.Parallel()
	src := `{"version": 1, "tools": [` + budgetTool + `],
 "budgets": [
  {"name": "a", "tools": ["pay", "nope"], "per": "week", "limit": "1e", "outcome": "allow"},
  {"name": "a", "tools": ["pay"], "limit": 2.5, "outcome": "deny", "approvers": 2, "window": "-1h"},
  {"name": "c", "tools": ["pay"], "sum": "x..y", "limit": -1, "outcome": "approve", "colour": "red"},
  {"tools": [], "limit": 1, "outcome": "deny"}
 ]}`
	_, err := Parse([]byte(src), testEnv(nil))
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want *LoadError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`budgets[0].tools: unknown tool "nope"`,
		`budgets[0].per: must be "run", "tenant" or "all", got "week"`,
		`budgets[0].limit: must be a decimal number`,
		`budgets[0].outcome: must be "approve" or "deny"`,
		`budgets[1].name: duplicate budget name "a"`,
		`budgets[1].limit: a count budget's limit is a whole number`,
		`budgets[1].outcome: approvers, approver_names, exclude_creator and ttl belong to an approve budget`,
		`budgets[1].window: bad duration "-1h"`,
		`budgets[2].sum: "x..y" is not an argument path`,
		`budgets[2].limit: must not be negative`,
		`budgets[2].colour: unknown field`,
		`budgets[3].name: missing`,
		`budgets[3].tools: must name at least one tool`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems lack %q:\n%s", want, msg)
		}
	}
}

func TestPolicyFileBudgets(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.json")
	src := `{"version": 1, "budgets": [{"name": "n", "tools": ["pay"], "limit": 1, "outcome": "deny"}]}`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	pf, err := LoadPolicy(path)
	if err != nil || len(pf.Budgets) != 1 || pf.Budgets[0].Where != path+" budgets[0]" {
		t.Fatalf("%+v %v", pf, err)
	}
}

// An MCP tool may have its own policy rules; a wrong one is a problem with
// its place.
func TestMCPToolPolicyParsed(t *testing.T) {
	t.Parallel()
	src := `{"version": 1, "tools": [], "mcp_servers": [{"name": "mail", "command": "mail-mcp", "tools": {
  "send": {"effect": "at_most_once", "policy": [{"name": "internal", "when": "!action.args.to.endsWith('@example.com')", "outcome": "approve"}]},
  "purge": {"effect": "at_most_once", "policy": [{"when": "action.args.x >", "outcome": "deny"}]}}}]}`
	_, err := Parse([]byte(src), testEnv(nil))
	if err == nil || !strings.Contains(err.Error(), "mcp_servers[0].tools.purge.policy[0].when: ERROR") {
		t.Fatalf("a rule that does not compile: %v", err)
	}
	f, err := Parse([]byte(strings.Replace(src, "action.args.x >", "true", 1)), testEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	rules := f.MCPServers[0].Tools["send"].Policy
	if len(rules) != 1 || rules[0].Outcome != policy.Approve || rules[0].Approvers != 1 || rules[0].Where != "mcp_servers[0].tools.send.policy[0]" {
		t.Fatalf("rules %+v", rules)
	}
}
