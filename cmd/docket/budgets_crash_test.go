package main

import (
	"context"
	"errors"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
)

// budgetCrashPlan: a keyed invoice and an at-most-once email under budgets,
// then a second invoice that depends on the email.
const budgetCrashPlan = `{"goal": "budgets under kills", "actions": [
  {"id": "inv1", "tool": "payments_create_invoice", "args": {"customer": "c_1", "amount": 1200, "currency": "EUR", "reference": "ref-1"}},
  {"id": "mail", "tool": "email_send", "args": {"to": "t@acme.example", "template": "welcome"}},
  {"id": "inv2", "tool": "payments_create_invoice", "depends_on": ["mail"], "args": {"customer": "c_2", "amount": 5, "currency": "EUR", "reference": "ref-2"}}]}`

// TestBudgetCrash kills a real docket process (SIGKILL) at every crash
// point of a budgeted keyed and a budgeted at-most-once action, resumes
// (a person resolving the email the way the email system says), and checks
// that the budget usage in the ledger equals the effects the world saw:
// per key (a key holds a reservation, kept, exactly when its effect
// happened) and in total (sum of amounts, count of emails).
func TestBudgetCrash(t *testing.T) {
	t.Parallel()
	effects := map[string]string{"inv1": "payments/ref-1", "mail": "email/t@acme.example/welcome", "inv2": "payments/ref-2"}
	amounts := map[string]int{"inv1": 1200, "inv2": 5}
	for _, action := range []string{"inv1", "mail"} {
		for _, point := range crashPoints {
			t.Run(action+"/"+point, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.withBudgets(t,
					map[string]any{"name": "invoices", "tools": []any{"payments_create_invoice"}, "window": "24h", "sum": "amount",
						"group_by": "currency", "limit": 100000, "outcome": "deny"},
					map[string]any{"name": "emails", "tools": []any{"email_send"}, "per": "run", "limit": 5, "outcome": "deny"})
				args := b.runArgs(b.plan(t, "plan", budgetCrashPlan), "--approve", "all", "--run-id", "bc", "--as", "alice")
				if first := child(t, point+":"+action, args...); !first.killed {
					t.Fatalf("the child never reached %s of %s:\n%s", point, action, first)
				}
				var last result
				for step := 0; ; step++ {
					if step > 4 {
						t.Fatalf("the run did not complete:\n%s", last)
					}
					last = child(t, "", args...)
					d := doc(t, last)
					if d.Status == "completed" {
						break
					}
					if d.action("mail").Status != "needs_review" {
						t.Fatalf("run %s, mail %s:\n%s", d.Status, d.action("mail").Status, last)
					}
					// A person checks the email system and says what happened.
					resolve := []string{"resolve", "--data", b.data, "--tools", b.tools, "bc", "mail", "--retry"}
					if b.world.Effect(effects["mail"]) > 0 {
						resolve = append(resolve[:len(resolve)-1], "--done", `{"message_id": "recovered", "to": "t@acme.example"}`)
					}
					wantCode(t, inproc(t, resolve...), exitOK)
				}
				d := doc(t, last)

				l, err := badgerdb.Open(context.Background(), badgerdb.Config{Dir: b.data})
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				sum, emails := 0, 0
				for id, name := range effects {
					n := b.world.Effect(name)
					if n != 1 {
						t.Fatalf("%s took effect %d times", name, n)
					}
					sum += n * amounts[id]
					if id == "mail" {
						emails += n
					}
					h, err := l.Hold(context.Background(), d.action(id).Key)
					if errors.Is(err, ledger.ErrNotFound) || err == nil && (h.Released || len(h.Charges) != 1) {
						t.Fatalf("%s (key %s) took effect, its hold is %+v (%v)", id, d.action(id).Key, h, err)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				all, err := l.Budgets(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]ledger.BudgetRecord{}
				for _, r := range all {
					got[r.Budget] = r
				}
				if inv := got["invoices"]; inv.Used != "1205" || inv.Count != 2 || sum != 1205 {
					t.Fatalf("invoices budget %+v, the world saw %d", inv, sum)
				}
				if em := got["emails"]; em.Used != "1" || em.Count != emails {
					t.Fatalf("emails budget %+v, the world saw %d", em, emails)
				}
			})
		}
	}
}
