package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docketrun/docket/evals/demoworld"
)

// TestServeApproverGroups: docket serve --tokens FILE where only fred's
// token is in group finance, and invoices over 1000 need one approver of
// group finance. The agent's run waits; eve's token (review scope, no
// group) is refused, through the CLI's --server and over HTTP, with an error
// naming the group, and nothing runs; fred's approval over HTTP lets the run
// complete, once, and the ledger's event records fred's groups. The local
// CLI (--as) carries no groups, so it cannot approve either.
func TestServeApproverGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var f map[string]any
	if err := json.Unmarshal(b.world.ToolsFile(demoworld.ToolsOptions{Timeout: "1s"}), &f); err != nil {
		t.Fatal(err)
	}
	for _, tl := range f["tools"].([]any) {
		if tl := tl.(map[string]any); tl["name"] == "payments_create_invoice" {
			tl["policy"] = []any{map[string]any{"name": "finance-approves", "when": "action.args.amount > 1000", "outcome": "approve",
				"approver_groups": []any{"finance"}}}
		}
	}
	raw, _ := json.Marshal(f)
	if err := os.WriteFile(b.tools, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := inproc(t, "tools", "check", "--tools", b.tools); r.code != exitOK || !strings.Contains(r.stdout, "finance-approves: when action.args.amount > 1000 -> approve by 1 of group finance") {
		t.Fatalf("tools check:\n%s", r)
	}
	const agent, eve, fred = "agent-token-0123456789abc", "eve-token-0123456789abcd", "fred-token-0123456789abc"
	hash := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tokens := filepath.Join(b.dir, "tokens.json")
	os.WriteFile(tokens, []byte(`{"version": 1, "tokens": [
  {"name": "agent", "scopes": ["read", "submit"], "sha256": "`+hash(agent)+`"},
  {"name": "eve", "scopes": ["read", "review"], "sha256": "`+hash(eve)+`", "groups": ["sales"]},
  {"name": "fred", "scopes": ["read", "review"], "env": "FRED_TOKEN", "groups": ["finance"]}
]}`), 0o600)
	s := startServe(t, map[string]string{"FRED_TOKEN": fred}, "--data", b.data, "--tools", b.tools, "--tokens", tokens)
	if out := strings.Join(s.lines, "\n"); !strings.Contains(out, "fred: read+review (groups finance)") {
		t.Fatalf("serve said:\n%s", out)
	}
	s.token = agent
	planJSON := json.RawMessage(`{"goal": "invoice", "actions": [{"id": "pay", "tool": "payments_create_invoice",
		"args": {"customer": "c_1", "amount": 1200, "currency": "EUR", "reference": "grp"}}]}`)
	if code := s.post(t, "/v1/runs", map[string]any{"run_id": "grp", "plan": planJSON}, nil); code != http.StatusCreated {
		t.Fatalf("agent's POST /v1/runs = %d", code)
	}

	r := inproc(t, "approve", "grp", "pay", "--server", s.base, "--token", eve)
	if r.code != exitBad || !strings.Contains(r.stderr, "rule finance-approves lets only members of group finance approve, not token:eve (groups: sales)") {
		t.Fatalf("eve's approve through --server: %s", r)
	}
	s.token = eve
	var refused struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if code := s.post(t, "/v1/runs/grp/actions/pay/approve", map[string]any{}, &refused); code < 400 || !strings.Contains(refused.Error.Message, "members of group finance") {
		t.Fatalf("eve's POST approve = %d %+v", code, refused)
	}
	// The local CLI names who acts with --as, and an --as identity has no
	// groups: it cannot claim membership.
	if r := inproc(t, "approve", "grp", "pay", "--server", s.base, "--token", eve, "--as", "fred"); r.code == exitOK {
		t.Fatalf("--as fred through eve's token approved: %s", r)
	}
	if n := invoices(b.world); n != 0 {
		t.Fatalf("%d invoices before a member of finance approved", n)
	}

	r = inproc(t, "approve", "grp", "pay", "--server", s.base, "--token", fred)
	if r.code != exitOK || !strings.Contains(r.stdout, `"status": "completed"`) {
		t.Fatalf("fred's approve: %s\nthe service's log:\n%s", r, s.stderr)
	}
	if n := invoices(b.world); n != 1 {
		t.Fatalf("%d invoices, want 1", n)
	}
	s.token = fred
	var evs struct {
		Events []struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"events"`
	}
	if code := s.get(t, "/v1/runs/grp/events", &evs); code != http.StatusOK {
		t.Fatalf("GET events = %d", code)
	}
	found := false
	for _, ev := range evs.Events {
		var d struct {
			By     string   `json:"by"`
			Groups []string `json:"groups"`
		}
		if ev.Type == "action.approved" && json.Unmarshal(ev.Data, &d) == nil && d.By == "token:fred" && slices.Equal(d.Groups, []string{"finance"}) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no action.approved by token:fred with groups [finance] in %+v", evs.Events)
	}
}
