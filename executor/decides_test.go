package executor

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
	"github.com/docketrun/docket/tools/tooltest"
)

// The ledger decides: another writer (a second node, a person on another
// node's page) changes the run between this drive's read and its claim,
// straight through the ledger, so this process's in-memory gate never
// hears of it. The claim is refused and the drive reads the run again.

// TestSiblingsSeeEachOthersTotals: two independent payments of 40 and 20
// under "deny past 50 in one run" start together: the second one decided
// sees the first in the run's totals and is denied; the world sees 40 only.
func TestSiblingsSeeEachOthersTotals(t *testing.T) {
	t.Parallel()
	global := []policy.Rule{{Name: "run-cap", Where: "policy[0]",
		When:    `(has(run.totals.pay) ? run.totals.pay.sum.amount : 0) + action.args.amount > 50`,
		Outcome: policy.Deny, Message: "at most 50 per run"}}
	if err := policy.Compile(global); err != nil {
		t.Fatal(err)
	}
	b := paySetup(t, tools.Keyed, global...)
	doc := b.runAs("r", mkPlan(t, pa("p1", "pay", `{"amount": 40, "currency": "EUR"}`), pa("p2", "pay", `{"amount": 20, "currency": "EUR"}`)), PolicyAll, "token:alice")
	wantStatus(t, doc, ledger.RunFailed)
	wantAction(t, doc, "p1", ledger.StatusSucceeded)
	if a := wantAction(t, doc, "p2", ledger.StatusRejected); a.Gate == nil || a.Gate.Rule != "run-cap" {
		t.Fatalf("p2 gate %+v, want rule run-cap", a.Gate)
	}
	if n := len(b.world.Keys()); n != 1 {
		t.Fatalf("the world saw %d payments, want 1", n)
	}
}

// TestPauseByAnotherWriter: a person's pause recorded by another node just
// before this drive claims the next action: nothing more starts, the run
// stays paused, and resuming it runs the rest.
func TestPauseByAnotherWriter(t *testing.T) {
	t.Parallel()
	var b *bundle
	var paused atomic.Bool
	b = setup(t, nil, func(c *Config) {
		c.Hooks.BeforeClaim = func(id string) {
			if id == "a2" && paused.CompareAndSwap(false, true) {
				if _, err := b.led.Apply(context.Background(), ledger.SetPause("r", "token:bob", "", nil)); err != nil {
					t.Errorf("pause from another node: %v", err)
				}
			}
		}
	})
	b.useTools(nil, b.world.Tool(spec("k", tools.Keyed)))
	p := mkPlan(t, pa("a1", "k", `{"n":1}`), pa("a2", "k", `{"n":2}`, "a1"), pa("a3", "k", `{"n":3}`, "a2"))
	doc, err := b.eng.Run(context.Background(), "r", p, &RunOptions{Policy: PolicyAll})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantStatus(t, doc, ledger.RunPaused)
	if doc.Run.PausedBy != "token:bob" {
		t.Fatalf("paused by %q", doc.Run.PausedBy)
	}
	wantAction(t, doc, "a1", ledger.StatusSucceeded)
	if a := row(t, doc, "a2"); a.Key != "" || a.Attempts != 0 {
		t.Fatalf("a2 started after the pause: %+v", a)
	}
	if n := len(b.world.Keys()); n != 1 {
		t.Fatalf("%d effects after a pause on another node, want only a1's", n)
	}
	if err := b.eng.Unpause(context.Background(), "r", "token:bob"); err != nil {
		t.Fatalf("Unpause: %v", err)
	}
	doc, err = b.eng.Resume(context.Background(), "r", nil)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	wantStatus(t, doc, ledger.RunCompleted)
	if n := len(b.world.Keys()); n != 3 {
		t.Fatalf("%d effects after resuming, want 3", n)
	}
}

// TestEditByAnotherWriter: a person on another node edits the next action's
// amount just before this drive claims it with the args it had read: the
// claim is refused, the drive reads the row again, and the call goes out
// with the edited args only.
func TestEditByAnotherWriter(t *testing.T) {
	t.Parallel()
	var b *bundle
	var edited atomic.Bool
	b = setup(t, nil, func(c *Config) {
		c.Hooks.BeforeClaim = func(id string) {
			if id == "a2" && edited.CompareAndSwap(false, true) {
				if _, err := b.led.Apply(context.Background(), ledger.Edit("r", "a2", json.RawMessage(`{"amount":5}`), "token:bob")); err != nil {
					t.Errorf("edit from another node: %v", err)
				}
			}
		}
	})
	b.useTools(nil, b.world.Tool(spec("k", tools.Keyed)))
	p := mkPlan(t, pa("a1", "k", `{"amount":1}`), pa("a2", "k", `{"amount":500}`, "a1"))
	doc, err := b.eng.Run(context.Background(), "r", p, &RunOptions{Policy: PolicyAll})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	wantStatus(t, doc, ledger.RunCompleted)
	old, err := plan.Key("r", "a2", "k", json.RawMessage(`{"amount":500}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := b.world.Requests(old); n != 0 {
		t.Fatalf("the superseded args were sent %d times", n)
	}
	if a := row(t, doc, "a2"); string(a.Args) != `{"amount":5}` || b.world.Effects(a.Key) != 1 {
		t.Fatalf("a2 %+v: want the edited args sent once", a)
	}
}

// TestRetryPastABudget: a payment's first attempt is not sent (its hold is
// given back); while it waits to retry, another run takes the room. The
// retry's re-reservation is checked against the limit: a budget that
// denies skips the payment and fails the run (charged 60 of 100, not 120);
// one that asks for approval parks it for a person, who can skip it.
func TestRetryPastABudget(t *testing.T) {
	t.Parallel()
	for _, outcome := range []policy.Outcome{policy.Deny, policy.Approve} {
		t.Run(string(outcome), func(t *testing.T) {
			t.Parallel()
			budgets := []policy.Budget{{Name: "spend", Where: "budgets[0]", Tools: []string{"pay"}, Per: policy.PerAll,
				Sum: "amount", Limit: "100", Outcome: outcome, Message: "100 in all"}}
			if err := policy.CheckBudgets(budgets, nil); err != nil {
				t.Fatal(err)
			}
			var b *bundle
			var other atomic.Bool
			b = setup(t, nil, func(c *Config) {
				inner := c.Sleep
				c.Sleep = func(ctx context.Context, d time.Duration) error {
					if other.CompareAndSwap(false, true) {
						doc, err := b.eng.Run(context.Background(), "r2", mkPlan(t, pa("p", "pay", `{"amount": 60}`)), &RunOptions{Policy: PolicyAll})
						if err != nil || doc.Run.Status != ledger.RunCompleted {
							t.Errorf("the other run: %s %v", doc.Run.Status, err)
						}
					}
					return inner(ctx, d)
				}
			})
			b.useTools(budgets, b.world.Tool(spec("pay", tools.Keyed)))
			b.world.FaultFunc = func(tool string, call tools.Call, n int) tooltest.Fault {
				if call.RunID == "r1" && n == 1 {
					return tooltest.FailNotSent
				}
				return tooltest.NoFault
			}
			doc, err := b.eng.Run(context.Background(), "r1", mkPlan(t, pa("p", "pay", `{"amount": 60}`)), &RunOptions{Policy: PolicyAll})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			k1 := keyOf(t, "r1", "p", "pay", `{"amount": 60}`)
			if n := b.world.Effects(k1); n != 0 {
				t.Fatalf("r1's payment took effect %d times past the budget", n)
			}
			if u := b.bucket("spend", "all", ""); u.Used != "60" && outcome == policy.Deny {
				t.Fatalf("usage %+v, want 60 (the world's)", u)
			}
			if outcome == policy.Deny {
				wantStatus(t, doc, ledger.RunFailed)
				wantAction(t, doc, "p", ledger.StatusSkipped)
				if !strings.Contains(doc.Run.Error, `budget "spend" exceeded`) {
					t.Fatalf("the run's error %q does not name the budget", doc.Run.Error)
				}
				for _, ev := range b.events("r1") {
					if ev.Type == ledger.EventActionSkipped && !strings.Contains(string(ev.Data), `budget \"spend\" exceeded`) {
						t.Fatalf("skip event %s does not name the budget", ev.Data)
					}
				}
				return
			}
			a := wantAction(t, doc, "p", ledger.StatusNeedsReview)
			if !strings.Contains(a.Error, "would pass a budget's limit") {
				t.Fatalf("parked payment says %q", a.Error)
			}
			if err := b.eng.Resolve(context.Background(), "r1", "p", ledger.Resolution{Skip: true, By: "token:bob"}); err != nil {
				t.Fatalf("Resolve skip: %v", err)
			}
			if u := b.bucket("spend", "all", ""); u.Used != "60" {
				t.Fatalf("usage after the person's skip %+v, want 60", u)
			}
		})
	}
}
