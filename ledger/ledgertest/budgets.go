package ledgertest

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// testBudgets: a claim's charges are reserved in the claim's commit, once
// per key (a re-claim of the key never reserves again), exactly (decimal
// sums, no float); a claim that would pass a limit is refused with a
// *BudgetError and writes nothing (not the claim, not another bucket it
// charges) unless the charge is approved over the limit; a failure that
// says nothing happened gives the reservation back (a retry's claim takes
// it again), one that may have taken effect keeps it (unless the caller
// knows better: NoEffect). The claim's and the failure's events name the
// budgets. Everything survives a reopen.
func testBudgets(t *testing.T, open Opener, opts Options) {
	c := newBudgetCase(t, open)
	c.firstClaim(t)
	c.refusedClaim(t)
	c.failures(t)
	c.overAndSkip(t)
	c.resolutions(t)
	c.badCharges(t)
	if opts.Durable {
		c.reopen(t, open)
	}
}

// budgetCase is testBudgets' run "r" with a spend budget per tenant and day
// and a calls budget per run; its steps run in order on one store.
type budgetCase struct {
	b      *bundle
	br     ledger.BudgetReader
	window time.Time
	count  ledger.Charge
	k1, k2 string // keys of a1 and a2
}

func newBudgetCase(t *testing.T, open Opener) *budgetCase {
	b := setup(t, open)
	br, ok := b.l.(ledger.BudgetReader)
	if !ok {
		t.Fatal("the store does not read budgets (ledger.BudgetReader)")
	}
	b.createRun(t, "r", 9)
	return &budgetCase{b: b, br: br, window: time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC),
		count: ledger.Charge{Budget: "calls", Scope: "run:r", Amount: "1", Limit: "4"}}
}

func (c *budgetCase) spend(amount string) ledger.Charge {
	return ledger.Charge{Budget: "spend", Scope: "tenant:token:alice", Window: c.window, Every: 24 * time.Hour,
		Group: "EUR", Amount: amount, Limit: "100.10"}
}

func (c *budgetCase) claim(t *testing.T, a string, n int, cs ...ledger.Charge) ledger.Op {
	args := `{"i":` + a[1:] + `}`
	return ledger.Claim("r", a, "t", key(t, "r", a, args), json.RawMessage(args), n).WithCharges(cs...)
}

func (c *budgetCase) ok(t *testing.T, a string, n int, cs ...ledger.Charge) ledger.Result {
	t.Helper()
	return c.b.mustOK(t, c.claim(t, a, n, cs...))
}

func (c *budgetCase) bucket(t *testing.T, id string) ledger.BudgetRecord {
	t.Helper()
	all, err := c.br.Budgets(c.b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.ID == id {
			return r
		}
	}
	return ledger.BudgetRecord{}
}

func (c *budgetCase) want(t *testing.T, ch ledger.Charge, used string, n int) {
	t.Helper()
	if r := c.bucket(t, ch.Bucket()); r.Used != used || r.Count != n {
		t.Fatalf("bucket %s: used %q count %d, want %q %d", ch.Bucket(), r.Used, r.Count, used, n)
	}
	if r, err := c.br.Budget(c.b.ctx, ch.Bucket()); err != nil || r.Used != used {
		t.Fatalf("Budget(%s): %+v %v", ch.Bucket(), r, err)
	}
}

func (c *budgetCase) lastEvent(t *testing.T) ledger.Event {
	t.Helper()
	evs := c.b.events(t, "r")
	return evs[len(evs)-1]
}

func (c *budgetCase) firstClaim(t *testing.T) {
	if _, err := c.br.Budget(c.b.ctx, c.count.Bucket()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Budget of an unused bucket: %v", err)
	}
	r := c.ok(t, "a1", 1, c.spend("60.05"), c.count)
	c.want(t, c.spend(""), "60.05", 1)
	c.want(t, c.count, "1", 1)
	last := c.lastEvent(t)
	var claimed struct {
		Budgets []map[string]any `json:"budgets"`
	}
	if err := json.Unmarshal(last.Data, &claimed); err != nil || last.Type != ledger.EventActionClaimed || len(claimed.Budgets) != 2 ||
		claimed.Budgets[0]["budget"] != "spend" || claimed.Budgets[0]["used"] != "60.05" || claimed.Budgets[0]["group"] != "EUR" {
		t.Fatalf("claim event: %s %s (%v)", last.Type, last.Data, err)
	}
	c.k1 = r.Key.Key
	if h, err := c.br.Hold(c.b.ctx, c.k1); err != nil || len(h.Charges) != 2 || h.Released || h.Charges[0].Amount != "60.05" {
		t.Fatalf("hold of a1: %+v %v", h, err)
	}
}

// refusedClaim: 60.05 + 40.06 = 100.11 > 100.10: refused, and nothing
// written (not even the count bucket, which had room); exactly up to the
// limit passes.
func (c *budgetCase) refusedClaim(t *testing.T) {
	b := c.b
	before := len(b.events(t, "r"))
	res := b.apply(t, c.claim(t, "a2", 1, c.count, c.spend("40.06")))
	var be *ledger.BudgetError
	if !errors.As(res.Err, &be) || !errors.Is(res.Err, ledger.ErrBudgetExceeded) || be.Charge.Budget != "spend" || be.Used != "60.05" {
		t.Fatalf("over the limit: %v", res.Err)
	}
	c.want(t, c.count, "1", 1)
	if got := b.row(t, "r", "a2"); got.Status != ledger.StatusPending || got.Key != "" {
		t.Fatalf("refused claim wrote the row: %+v", got)
	}
	if _, err := b.l.Key(b.ctx, key(t, "r", "a2", `{"i":2}`)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("refused claim wrote the key: %v", err)
	}
	if n := len(b.events(t, "r")); n != before {
		t.Fatalf("refused claim appended %d events", n-before)
	}
	// Exactly up to the limit: 100.10, not 100.10000000000001.
	c.k2 = c.ok(t, "a2", 1, c.count, c.spend("40.05")).Key.Key
	c.want(t, c.spend(""), "100.1", 2)
}

// failures: what an attempt's failure does to its reservation.
func (c *budgetCase) failures(t *testing.T) {
	b, k1 := c.b, c.k1
	// A retryable failure that says nothing happened gives it back until
	// the next attempt's claim takes the same amounts again (whatever that
	// claim carries: reserved once per key).
	b.mustOK(t, ledger.FailWith(k1, 1, "connection refused", true, ledger.FailureNotSent, nil))
	c.want(t, c.spend(""), "40.05", 1)
	c.want(t, c.count, "1", 1)
	c.ok(t, "a1", 2, c.spend("99"), c.count)
	c.want(t, c.spend(""), "100.1", 2)
	c.want(t, c.count, "2", 2)
	// A retryable failure whose outcome is unknown keeps it.
	b.mustOK(t, ledger.FailWith(k1, 2, "reset", true, ledger.FailureUnknown, nil))
	c.want(t, c.spend(""), "100.1", 2)
	c.ok(t, "a1", 3)
	c.want(t, c.spend(""), "100.1", 2)
	// A definite failure gives it back, and the event says so.
	b.mustOK(t, ledger.FailWith(k1, 3, "400 bad request", false, ledger.FailureDefinite, nil).NoEffect())
	c.want(t, c.spend(""), "40.05", 1)
	c.want(t, c.count, "1", 1)
	if last := c.lastEvent(t); last.Type != ledger.EventActionFailed || !json.Valid(last.Data) ||
		!slices.Contains(releasedOf(t, last.Data), "spend") {
		t.Fatalf("failed event: %s %s", last.Type, last.Data)
	}
	if h, err := c.br.Hold(b.ctx, k1); err != nil || !h.Released {
		t.Fatalf("hold after release: %+v %v", h, err)
	}
	// Released once: an identical repeat of the outcome gives nothing back again.
	b.mustOK(t, ledger.FailWith(k1, 3, "400 bad request", false, ledger.FailureDefinite, nil).NoEffect())
	c.want(t, c.spend(""), "40.05", 1)

	// An unknown outcome keeps it, even when a later attempt fails definitely.
	b.mustOK(t, ledger.FailWith(c.k2, 1, "timeout", true, ledger.FailureUnknown, nil))
	c.ok(t, "a2", 2, c.count, c.spend("40.05"))
	b.mustOK(t, ledger.FailWith(c.k2, 2, "400", false, ledger.FailureDefinite, nil))
	c.want(t, c.spend(""), "40.05", 1)

	// ... unless the caller knows no attempt took effect (a keyed call
	// answered definitely under the same key).
	r3 := c.ok(t, "a3", 1, c.spend("1"))
	c.want(t, c.spend(""), "41.05", 2)
	b.mustOK(t, ledger.FailWith(r3.Key.Key, 1, "timeout", true, ledger.FailureUnknown, nil))
	c.ok(t, "a3", 2, c.spend("1"))
	b.mustOK(t, ledger.FailWith(r3.Key.Key, 2, "402 declined", false, ledger.FailureDefinite, nil).NoEffect())
	c.want(t, c.spend(""), "40.05", 1)
	if r := b.apply(t, ledger.Succeed(r3.Key.Key, 2, json.RawMessage(`{}`)).NoEffect()); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("NoEffect on a success: %v", r.Err)
	}
}

func (c *budgetCase) overAndSkip(t *testing.T) {
	b := c.b
	// Approved over the limit: reserved all the same.
	over := c.spend("1000")
	over.Over = true
	c.ok(t, "a6", 1, over)
	c.want(t, c.spend(""), "1040.05", 2)

	// A retry-pending key that may have taken effect keeps it when it is
	// skipped, unless the caller knows better.
	r4 := c.ok(t, "a4", 1, c.count)
	c.want(t, c.count, "2", 2)
	b.mustOK(t, ledger.FailWith(r4.Key.Key, 1, "reset", true, ledger.FailureUnknown, nil))
	b.mustOK(t, ledger.Skip("r", "a4", "run failed"))
	c.want(t, c.count, "2", 2)

	// Success keeps it.
	r5 := c.ok(t, "a5", 1, c.count)
	b.mustOK(t, ledger.Succeed(r5.Key.Key, 1, json.RawMessage(`{"ok":true}`)))
	c.want(t, c.count, "3", 3)
}

// resolutions: a person's resolution settles an unknown outcome: "skip"
// says the action did not take effect (the budgets get it back, and the
// resolved event says so), "done" says it did (kept).
func (c *budgetCase) resolutions(t *testing.T) {
	b := c.b
	r8 := c.ok(t, "a8", 1, c.count)
	b.mustOK(t, ledger.NeedsReview(r8.Key.Key, 1, "timeout"))
	c.want(t, c.count, "4", 4)
	b.mustOK(t, ledger.Resolve("r", "a8", ledger.Resolution{Skip: true, By: "ann"}))
	c.want(t, c.count, "3", 3)
	var resolved ledger.Event
	for _, e := range b.events(t, "r") {
		if e.Type == ledger.EventActionResolved && e.ActionID == "a8" {
			resolved = e
		}
	}
	if !slices.Contains(releasedOf(t, resolved.Data), "calls") {
		t.Fatalf("resolved event: %s %s", resolved.Type, resolved.Data)
	}
	b.mustOK(t, ledger.Resolve("r", "a8", ledger.Resolution{Skip: true, By: "ann"})) // identical repeat
	c.want(t, c.count, "3", 3)
	r9 := c.ok(t, "a9", 1, c.count)
	b.mustOK(t, ledger.NeedsReview(r9.Key.Key, 1, "timeout"))
	b.mustOK(t, ledger.Resolve("r", "a9", ledger.Resolution{Done: json.RawMessage(`{"id":9}`), By: "ann"}))
	c.want(t, c.count, "4", 4)
}

// badCharges: bad charges and charges on other ops are refused.
func (c *budgetCase) badCharges(t *testing.T) {
	b := c.b
	if r := b.apply(t, c.claim(t, "a7", 1, c.spend("-5"))); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("negative amount: %v", r.Err)
	}
	if r := b.apply(t, c.claim(t, "a7", 1, c.spend("1e3"))); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("amount with an exponent: %v", r.Err)
	}
	if r := b.apply(t, ledger.Skip("r", "a7", "x").WithCharges(c.count)); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("charges on a skip: %v", r.Err)
	}
}

// reopen: everything survives a reopen, and the reopened store goes on from
// the recorded usage.
func (c *budgetCase) reopen(t *testing.T, open Opener) {
	b := c.b
	b.l.Close()
	l := open(t, b.cfg)
	all, err := l.(ledger.BudgetReader).Budgets(b.ctx)
	if err != nil || len(all) != 2 || all[0].Budget != "calls" || all[1].Used != "1040.05" || all[1].Window != c.window ||
		all[1].Every != 24*time.Hour || all[1].Group != "EUR" || all[1].Limit != "100.10" {
		t.Fatalf("after reopen: %+v %v", all, err)
	}
	if h, err := l.(ledger.BudgetReader).Hold(b.ctx, c.k1); err != nil || !h.Released || len(h.Charges) != 2 {
		t.Fatalf("hold after reopen: %+v %v", h, err)
	}
	res, err := l.Apply(b.ctx, ledger.Claim("r", "a7", "t", key(t, "r", "a7", `{"i":7}`), json.RawMessage(`{"i":7}`), 1).WithCharges(c.spend("0.01")))
	if err != nil || !errors.Is(res[0].Err, ledger.ErrBudgetExceeded) {
		t.Fatalf("claim past the recorded usage after reopen: %v %v", err, res)
	}
}

func releasedOf(t *testing.T, data json.RawMessage) []string {
	t.Helper()
	var d struct {
		Released []string `json:"budgets_released"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	return d.Released
}
