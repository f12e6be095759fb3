package ledgertest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
)

// testLedgerDecides: a claim that would start an action re-checks, in its
// own transaction, everything its caller decided from, and another writer
// may have changed any of it between the caller's read and the claim: a
// person's pause or a cancel (refused; a claim that only parks the action
// for a person is not), an edit (the claim names the args it read), a
// reject, the approvals that count for exactly the args being sent (the
// row's recorded gate and the gate the caller decided under), a retry's
// re-reservation of a budget (checked against the limit like a first one),
// and siblings started since the run's totals were read, in the same
// commit or another. A refused claim writes nothing: no key record, no
// event, no budget usage.
func testLedgerDecides(t *testing.T, open Opener) {
	d := decides{b: setup(t, open), allow: ledger.Gate{Outcome: "allow"}}
	t.Run("pause", d.pause)
	t.Run("cancel", d.cancel)
	t.Run("edit", d.edit)
	t.Run("reject", d.reject)
	t.Run("approvals", d.approvals)
	t.Run("budget retry", d.budgetRetry)
	t.Run("totals", d.totals)
	t.Run("new run", d.newRun)
}

// decides is testLedgerDecides' store; its subtests use runs of their own.
type decides struct {
	b     *bundle
	allow ledger.Gate
}

func (d decides) claim(t *testing.T, run, a, args string) ledger.Op {
	return ledger.Claim(run, a, "t", key(t, run, a, args), json.RawMessage(args), 1)
}

// stale applies op and wants it refused as stale, saying want, with no event
// written.
func (d decides) stale(t *testing.T, run string, op ledger.Op, want string) {
	t.Helper()
	b := d.b
	before := len(b.events(t, run))
	r := b.apply(t, op)
	var se *ledger.StaleError
	if !errors.As(r.Err, &se) || !errors.Is(r.Err, ledger.ErrStale) || !errors.Is(r.Err, ledger.ErrConflict) {
		t.Fatalf("want *StaleError (%s), got %v", want, r.Err)
	}
	if !strings.Contains(se.Msg, want) {
		t.Fatalf("refusal %q does not say %q", se.Msg, want)
	}
	if n := len(b.events(t, run)); n != before {
		t.Fatalf("a refused claim appended %d events", n-before)
	}
}

func (d decides) pause(t *testing.T) {
	b := d.b
	b.createRun(t, "p", 3)
	b.mustOK(t, ledger.SetRunStatus("p", ledger.RunRunning, "", "", nil))
	b.mustOK(t, ledger.SetPause("p", "token:bob", "", nil))
	d.stale(t, "p", d.claim(t, "p", "a1", `{"i":1}`).Decided(json.RawMessage(`{"i":1}`), d.allow, false), "paused by token:bob")
	if _, err := b.l.Key(b.ctx, key(t, "p", "a1", `{"i":1}`)); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused claim wrote its key: %v", err)
	}
	// Parking for a person is not starting anything.
	r := b.mustOK(t, d.claim(t, "p", "a2", `{"i":2}`).Parking())
	b.mustOK(t, ledger.NeedsReview(r.Key.Key, 1, "parked"))
	// Resumed: the same claim goes through.
	b.mustOK(t, ledger.SetPause("p", "", ledger.RunRunning, nil))
	b.mustOK(t, d.claim(t, "p", "a1", `{"i":1}`).Decided(json.RawMessage(`{"i":1}`), d.allow, false))
	// A retry of a pending key is a new attempt: refused while paused.
	b.mustOK(t, ledger.FailWith(key(t, "p", "a1", `{"i":1}`), 1, "503", true, ledger.FailureNotProcessed, nil))
	b.mustOK(t, ledger.SetPause("p", "token:bob", "", nil))
	d.stale(t, "p", ledger.Claim("p", "a1", "t", key(t, "p", "a1", `{"i":1}`), json.RawMessage(`{"i":1}`), 2), "paused")
}

func (d decides) cancel(t *testing.T) {
	b := d.b
	b.createRun(t, "c", 1)
	b.mustOK(t, ledger.SetRunStatus("c", ledger.RunCancelled, ledger.EventRunCancelled, "", nil))
	d.stale(t, "c", d.claim(t, "c", "a1", `{"i":1}`), "cancelled")
}

func (d decides) edit(t *testing.T) {
	b := d.b
	b.createRun(t, "e", 2)
	read := json.RawMessage(`{"i":1}`) // what the driving node read
	b.mustOK(t, ledger.Edit("e", "a1", json.RawMessage(`{"i":100}`), "token:bob"))
	d.stale(t, "e", d.claim(t, "e", "a1", `{"i":1}`).Decided(read, d.allow, false), "edited")
	// Deciding from what the row holds now goes through.
	b.mustOK(t, d.claim(t, "e", "a1", `{"i":100}`).Decided(json.RawMessage(`{"i":100}`), d.allow, false))
	// Edited to the same args in another form: still the args read.
	b.mustOK(t, ledger.Edit("e", "a2", json.RawMessage(`{ "i" : 2 }`), "token:bob"))
	b.mustOK(t, d.claim(t, "e", "a2", `{"i":2}`).Decided(json.RawMessage(`{"i":2}`), d.allow, false))
}

func (d decides) reject(t *testing.T) {
	b := d.b
	b.createRun(t, "j", 1)
	b.mustOK(t, ledger.Reject("j", "a1", "no", "token:bob"))
	b.mustConflict(t, d.claim(t, "j", "a1", `{"i":1}`).Decided(json.RawMessage(`{"i":1}`), d.allow, false))
}

func (d decides) approvals(t *testing.T) {
	b := d.b
	b.createRun(t, "g", 3)
	two := ledger.Gate{Rule: "four-eyes", Outcome: "approve", Need: 2}
	b.mustOK(t, ledger.Decide("g", "a1", two))
	b.mustOK(t, ledger.Approve("g", "a1", nil, "token:bob"))
	// The row's own gate counts even when the caller says it needs nobody.
	d.stale(t, "g", d.claim(t, "g", "a1", `{"i":1}`).Decided(json.RawMessage(`{"i":1}`), d.allow, false), "1 of 2 approvals")
	d.stale(t, "g", d.claim(t, "g", "a1", `{"i":1}`), "1 of 2 approvals")
	b.mustOK(t, ledger.Approve("g", "a1", nil, "token:carol"))
	// Approved for {"i":1}: not for other args sent under the row.
	d.stale(t, "g", ledger.Claim("g", "a1", "t", key(t, "g", "a1", `{"i":9}`), json.RawMessage(`{"i":9}`), 1), "not approved")
	r := b.mustOK(t, d.claim(t, "g", "a1", `{"i":1}`).Decided(json.RawMessage(`{"i":1}`), two, false))
	if r.Action.Status != ledger.StatusClaimed {
		t.Fatalf("claim with two approvals: %+v", r.Action)
	}
	// A gate the caller decided under that the row does not have yet
	// (written in the same commit or not at all) counts too.
	d.stale(t, "g", d.claim(t, "g", "a2", `{"i":2}`).Decided(json.RawMessage(`{"i":2}`), two, false), "not approved for the arguments being sent: four-eyes")
	// A deny recorded by another node refuses.
	b.mustOK(t, ledger.Decide("g", "a3", ledger.Gate{Rule: "no", Outcome: "deny"}))
	d.stale(t, "g", d.claim(t, "g", "a3", `{"i":3}`).Decided(json.RawMessage(`{"i":3}`), d.allow, false), "denies")
}

func (d decides) budgetRetry(t *testing.T) {
	b := d.b
	if _, ok := b.l.(ledger.BudgetReader); !ok {
		t.Skip("the store does not keep budgets")
	}
	b.createRun(t, "b", 3)
	charge := func(amount string) ledger.Charge {
		return ledger.Charge{Budget: "spend", Scope: "all:decides", Amount: amount, Limit: "100"}
	}
	k1 := key(t, "b", "a1", `{"i":1}`)
	b.mustOK(t, d.claim(t, "b", "a1", `{"i":1}`).WithCharges(charge("60")))
	// A 429: nothing processed, the hold is given back.
	b.mustOK(t, ledger.FailWith(k1, 1, "429", true, ledger.FailureNotProcessed, nil))
	b.mustOK(t, d.claim(t, "b", "a2", `{"i":2}`).WithCharges(charge("60")))
	// The retry would take the room again: 120 > 100.
	r := b.apply(t, ledger.Claim("b", "a1", "t", k1, json.RawMessage(`{"i":1}`), 2).WithCharges(charge("60")))
	var be *ledger.BudgetError
	if !errors.As(r.Err, &be) || be.Used != "60" {
		t.Fatalf("re-reservation past the limit: %v", r.Err)
	}
	// Without the charges on the op, the bucket's limit holds.
	if r := b.apply(t, ledger.Claim("b", "a1", "t", k1, json.RawMessage(`{"i":1}`), 2)); !errors.Is(r.Err, ledger.ErrBudgetExceeded) {
		t.Fatalf("re-reservation without charges: %v", r.Err)
	}
	rec, err := b.l.Key(b.ctx, k1)
	if err != nil || rec.State != ledger.StatusPending || rec.Attempt != 1 {
		t.Fatalf("a refused retry changed the key: %+v %v", rec, err)
	}
	bucket, err := b.l.(ledger.BudgetReader).Budget(b.ctx, charge("").Bucket())
	if err != nil || bucket.Used != "60" || bucket.Count != 1 {
		t.Fatalf("bucket after the refused retry: %+v %v", bucket, err)
	}
	// Approved past the limit: goes through.
	over := charge("60")
	over.Over = true
	b.mustOK(t, ledger.Claim("b", "a1", "t", k1, json.RawMessage(`{"i":1}`), 2).WithCharges(over))
	if bucket, _ := b.l.(ledger.BudgetReader).Budget(b.ctx, charge("").Bucket()); bucket.Used != "120" {
		t.Fatalf("bucket after an approved retry: %+v", bucket)
	}
}

func (d decides) totals(t *testing.T) {
	b := d.b
	b.createRun(t, "s", 3)
	// Two siblings decided on the same totals, claimed in one commit:
	// the second saw neither started, so it is refused.
	res, err := b.l.Apply(b.ctx,
		d.claim(t, "s", "a1", `{"i":1}`).Uncounted("a2", "a3"),
		d.claim(t, "s", "a2", `{"i":2}`).Uncounted("a1", "a3"))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !errors.Is(res[1].Err, ledger.ErrStale) || !strings.Contains(res[1].Err.Error(), "a1 started") {
		t.Fatalf("siblings on stale totals: %v, %v", res[0].Err, res[1].Err)
	}
	// Deciding again, with a1 counted: goes through. In another commit
	// the same holds for a3.
	b.mustOK(t, d.claim(t, "s", "a2", `{"i":2}`).Uncounted("a3"))
	d.stale(t, "s", d.claim(t, "s", "a3", `{"i":3}`).Uncounted("a1"), "a1 started")
	b.mustOK(t, d.claim(t, "s", "a3", `{"i":3}`).Uncounted())
}

// newRun: a run recorded together with its first claims in one commit. The
// claims (InNewRun) go through only when the commit created the run: on a
// run recorded before, with the same plan or another, they are refused and
// write nothing, whatever the row's state.
func (d decides) newRun(t *testing.T) {
	b := d.b
	p := testPlan("goal of n", 3)
	rows := func() []ledger.Action {
		return []ledger.Action{
			{ID: "a1", Tool: "t", Args: json.RawMessage(`{"i":1}`), Status: ledger.StatusApproved},
			{ID: "a2", Tool: "t", Args: json.RawMessage(`{"i":2}`), Status: ledger.StatusPending},
			{ID: "a3", Tool: "t", Args: json.RawMessage(`{"i":3}`), Status: ledger.StatusPending, DependsOn: []string{"a1"}},
		}
	}
	p.Actions[2].DependsOn = []string{"a1"}
	create, err := ledger.NewRun(ledger.Run{ID: "n", Policy: "safe"}, p, rows())
	if err != nil {
		t.Fatal(err)
	}
	first := func() []ledger.Op {
		return []ledger.Op{create,
			d.claim(t, "n", "a1", `{"i":1}`).Decided(json.RawMessage(`{"i":1}`), d.allow, false).InNewRun(),
			d.claim(t, "n", "a2", `{"i":2}`).InNewRun()}
	}
	res, err := b.l.Apply(b.ctx, first()...)
	if err != nil {
		t.Fatal(err)
	}
	run, created, err := res[0].CreatedRun()
	if err != nil || !created || run.ID != "n" || run.Status != ledger.RunRunning || run.Revision != 1 {
		t.Fatalf("NewRun: %+v created %v, %v", run, created, err)
	}
	for i, id := range []string{"a1", "a2"} {
		r := res[i+1]
		if r.Err != nil || r.Action.Status != ledger.StatusClaimed || r.Key.State != ledger.StatusClaimed || r.Key.Attempt != 1 {
			t.Fatalf("claim of %s in the commit that created the run: %+v %+v %v", id, r.Action, r.Key, r.Err)
		}
	}
	wantTypes(t, b.events(t, "n"), "run.created", "plan.recorded", "action.approved:a1", "action.claimed:a1", "action.claimed:a2")
	if got := b.row(t, "n", "a3"); got.Status != ledger.StatusPending || got.Key != "" {
		t.Fatalf("a3, not claimed, changed: %+v", got)
	}
	doc, err := b.l.Doc(b.ctx, "n")
	if err != nil || doc.Run.PlanHash == "" || len(doc.Actions) != 3 {
		t.Fatalf("Doc after NewRun with claims: %+v %v", doc, err)
	}

	// The same commit again (a second caller, a retry): the run exists
	// with the same plan, so nothing is created and the claims, already
	// won above, are refused without a write.
	before := len(b.events(t, "n"))
	res, err = b.l.Apply(b.ctx, first()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, created, err := res[0].CreatedRun(); created || err != nil {
		t.Fatalf("NewRun of a recorded run: created %v, %v", created, err)
	}
	for _, r := range res[1:] {
		if !errors.Is(r.Err, ledger.ErrStale) || !strings.Contains(r.Err.Error(), "not created by this commit") {
			t.Fatalf("claim InNewRun of a recorded run: %v", r.Err)
		}
	}
	if n := len(b.events(t, "n")); n != before {
		t.Fatalf("refused claims appended %d events", n-before)
	}

	// A recorded run whose row is free: refused all the same, even
	// though a claim decided from a read would go through.
	d.stale(t, "n", d.claim(t, "n", "a3", `{"i":3}`).InNewRun(), "not created by this commit")
	k3 := key(t, "n", "a3", `{"i":3}`)
	if _, err := b.l.Key(b.ctx, k3); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused claim wrote its key: %v", err)
	}

	// Another plan under the same id: the NewRun is refused, and so are
	// the claims decided from its rows.
	other := testPlan("another goal", 3)
	mismatch, err := ledger.NewRun(ledger.Run{ID: "n", Policy: "safe"}, other, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err = b.l.Apply(b.ctx, mismatch, d.claim(t, "n", "a3", `{"i":3}`).InNewRun())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := res[0].CreatedRun(); !errors.Is(err, ledger.ErrPlanMismatch) {
		t.Fatalf("NewRun with another plan: %v", err)
	}
	if !errors.Is(res[1].Err, ledger.ErrStale) {
		t.Fatalf("claim after a refused NewRun: %v", res[1].Err)
	}

	// Another run created in the same commit does not count.
	create2, err := ledger.NewRun(ledger.Run{ID: "n2", Policy: "safe"}, testPlan("goal of n2", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err = b.l.Apply(b.ctx, create2, d.claim(t, "n", "a3", `{"i":3}`).InNewRun(), d.claim(t, "n2", "a1", `{"i":1}`).InNewRun())
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[1].Err, ledger.ErrStale) || res[2].Err != nil {
		t.Fatalf("claims InNewRun beside another run's NewRun: %v, %v", res[1].Err, res[2].Err)
	}

	// Only a claim takes it; invalid arguments are refused up front.
	if r := b.apply(t, ledger.Succeed(k3, 1, json.RawMessage(`{}`)).InNewRun()); !errors.Is(r.Err, ledger.ErrInvalid) {
		t.Fatalf("InNewRun on a Succeed: %v", r.Err)
	}
	if _, err := ledger.NewRun(ledger.Run{ID: ""}, p, nil); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("NewRun without a run id: %v", err)
	}
	if _, err := ledger.NewRun(ledger.Run{ID: "x"}, nil, nil); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("NewRun without a plan: %v", err)
	}
}
