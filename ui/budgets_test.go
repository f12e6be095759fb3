package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ui"
)

// GET /v1/budgets shows what claims reserved, exactly, per bucket, with the
// window's bounds and what remains (negative past an approved limit); a
// read token may see it.
func TestBudgetsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, options{tune: func(cfg *ui.Config) {
		cfg.ScopedTokens = []ui.Token{{Name: "reader", Scopes: []ui.Scope{ui.ScopeRead}, Secret: "reader-token-0123456789"}}
	}})
	var empty ui.BudgetList
	if code := b.call("GET", "/v1/budgets", nil, &empty); code != http.StatusOK || empty.Budgets == nil || len(empty.Budgets) != 0 {
		t.Fatalf("no budgets = %d %+v", code, empty)
	}
	b.createPayMail("rb")
	window := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	c := ledger.Charge{Budget: "daily-spend", Scope: "tenant:token:alice", Window: window, Every: 24 * time.Hour, Group: "EUR", Amount: "1200.10", Limit: "1000", Over: true}
	res, err := b.led.Apply(context.Background(), ledger.Claim("rb", "pay", "payments_create_invoice", "k-rb-pay", json.RawMessage(`{"amount": 1200.10}`), 1).WithCharges(c))
	if err != nil || res[0].Err != nil {
		t.Fatalf("claim: %v %v", err, res[0].Err)
	}
	var list ui.BudgetList
	code := b.callWith("GET", "/v1/budgets", nil, &list, map[string]string{"Authorization": "Bearer reader-token-0123456789"})
	if code != http.StatusOK || len(list.Budgets) != 1 {
		t.Fatalf("GET /v1/budgets = %d %+v", code, list)
	}
	got := list.Budgets[0]
	if got.Budget != "daily-spend" || got.Scope != "tenant:token:alice" || got.Group != "EUR" || got.Used != "1200.1" || got.Limit != "1000" ||
		got.Remaining != "-200.1" || got.Count != 1 || got.Window == nil || !got.Window.Equal(window) || !got.WindowEnd.Equal(window.Add(24*time.Hour)) {
		t.Fatalf("bucket %+v", got)
	}
}
