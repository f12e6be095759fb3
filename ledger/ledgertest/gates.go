package ledgertest

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
)

// testGates: a row's policy gate (Decide) and people's approvals (Approve):
// distinct approvers counted up to the gate's need, the creator excluded
// when the gate says so, only named approvers when it names them, approvals
// bound to the exact args (an edit needs new ones), expiring after the
// gate's TTL, used by one claim only; and rows from before gates (no Gate,
// no Approvals) approved by one person as before. Every field survives a
// reopen of a durable store.
func testGates(t *testing.T, open Opener, opts Options) {
	b := setup(t, open)
	p := testPlan("pay", 3)
	if _, _, err := b.l.CreateRun(b.ctx, ledger.Run{ID: "g", Policy: "safe", CreatedBy: "token:alice"}, p, nil); err != nil {
		t.Fatal(err)
	}
	if run, err := b.l.GetRun(b.ctx, "g"); err != nil || run.CreatedBy != "token:alice" {
		t.Fatalf("run creator: %+v %v", run, err)
	}
	gate := ledger.Gate{Rule: "four-eyes", Outcome: "approve", Need: 2, ExcludeCreator: true, Names: []string{"token:*"}, Message: "two people"}
	r := b.mustOK(t, ledger.Decide("g", "a1", gate))
	if r.Action.Status != ledger.StatusPending || r.Action.Gate == nil || r.Action.Gate.Need != 2 {
		t.Fatalf("after Decide: %+v", r.Action)
	}
	b.mustOK(t, ledger.Decide("g", "a1", gate)) // identical: no new event

	gateApprovals(t, b)

	// A stricter gate (the resolved amount is larger) asks for more.
	stricter := gate
	stricter.Need = 3
	if r := b.mustOK(t, ledger.Decide("g", "a1", stricter)); r.Action.Status != ledger.StatusPending {
		t.Fatalf("need 3 with 2 approvals: %+v", r.Action)
	}
	b.mustOK(t, ledger.Decide("g", "a1", gate))

	k1 := gateClaim(t, b)

	// An edit (other args) drops the approvals.
	b.mustOK(t, ledger.Decide("g", "a2", gate))
	b.mustOK(t, ledger.Approve("g", "a2", nil, "token:bob"))
	b.mustOK(t, ledger.Edit("g", "a2", json.RawMessage(`{"i":22}`), "token:bob"))
	if got := b.row(t, "g", "a2"); len(got.Approvals) != 0 || got.Status != ledger.StatusPending {
		t.Fatalf("after edit: %+v", got)
	}

	gateExpiry(t, b, gate)

	// Rows from before gates: one approval, as always.
	b.createRun(t, "old", 1)
	if r := b.mustOK(t, ledger.Approve("old", "a1", nil, "cli:x")); r.Action.Status != ledger.StatusApproved {
		t.Fatalf("legacy approve: %+v", r.Action)
	}
	if opts.Durable {
		reopenGates(t, b, open, k1)
	}
}

// gateApprovals: who may approve a1 under the four-eyes gate, counted once each, for exactly its args.
func gateApprovals(t *testing.T, b *bundle) {
	t.Helper()
	refused := b.apply(t, ledger.Approve("g", "a1", nil, "token:alice"))
	if !errors.Is(refused.Err, ledger.ErrApproverRefused) {
		t.Fatalf("the creator approved: %v", refused.Err)
	}
	if r := b.apply(t, ledger.Approve("g", "a1", nil, "cli:mallory")); !errors.Is(r.Err, ledger.ErrApproverRefused) {
		t.Fatalf("an identity the gate does not name approved: %v", r.Err)
	}
	r := b.mustOK(t, ledger.Approve("g", "a1", nil, "token:bob"))
	if r.Action.Status != ledger.StatusPending || len(r.Action.Approvals) != 1 {
		t.Fatalf("one of two approvals: %+v", r.Action)
	}
	b.mustOK(t, ledger.Approve("g", "a1", nil, "token:bob")) // the same person again counts once
	if got := b.row(t, "g", "a1"); got.Status != ledger.StatusPending || len(got.Approvals) != 1 {
		t.Fatalf("bob twice: %+v", got)
	}
	r = b.mustOK(t, ledger.Approve("g", "a1", nil, "token:carol"))
	if r.Action.Status != ledger.StatusApproved {
		t.Fatalf("two approvals: %+v", r.Action)
	}
	args := json.RawMessage(`{"i":1}`)
	if got := b.row(t, "g", "a1").Approvers(args, time.Now()); !slices.Equal(got, []string{"token:bob", "token:carol"}) {
		t.Fatalf("approvers %v", got)
	}
	if got := b.row(t, "g", "a1").Approvers(json.RawMessage(`{"i":2}`), time.Now()); len(got) != 0 {
		t.Fatalf("approvals count for other args: %v", got)
	}
}

// gateClaim: the claim uses the approvals and says who gave them; it
// returns the claimed key.
func gateClaim(t *testing.T, b *bundle) string {
	t.Helper()
	args := json.RawMessage(`{"i":1}`)
	k1 := key(t, "g", "a1", `{"i":1}`)
	b.mustOK(t, ledger.Claim("g", "a1", "t", k1, args, 1))
	evs := b.events(t, "g")
	var claim ledger.Event
	for _, ev := range evs {
		if ev.Type == ledger.EventActionClaimed {
			claim = ev
		}
	}
	var cd struct {
		ApprovedBy []string `json:"approved_by"`
		Rule       string   `json:"rule"`
	}
	if err := json.Unmarshal(claim.Data, &cd); err != nil || !slices.Equal(cd.ApprovedBy, []string{"token:bob", "token:carol"}) || cd.Rule != "four-eyes" {
		t.Fatalf("claim event %s", claim.Data)
	}
	if got := b.row(t, "g", "a1"); len(got.Approvers(args, time.Now())) != 0 {
		t.Fatalf("approvals still count after the claim: %+v", got.Approvals)
	}
	var a1 []ledger.Event
	for _, ev := range evs {
		if ev.ActionID == "a1" {
			a1 = append(a1, ev)
		}
	}
	wantTypes(t, a1, "action.policy:a1", "action.approval_added:a1", "action.approved:a1",
		"action.policy:a1", "action.policy:a1", "action.claimed:a1")
	return k1
}

// gateExpiry: an approval expires after the gate's TTL (the suite's clock
// moves 1ms per reading).
func gateExpiry(t *testing.T, b *bundle, gate ledger.Gate) {
	t.Helper()
	short := gate
	short.Need, short.TTL = 1, time.Nanosecond
	b.mustOK(t, ledger.Decide("g", "a3", short))
	b.mustOK(t, ledger.Approve("g", "a3", nil, "token:bob"))
	got := b.row(t, "g", "a3")
	if len(got.Approvals) != 1 || got.Approvals[0].Expires.IsZero() {
		t.Fatalf("approval without expiry: %+v", got.Approvals)
	}
	if n := len(got.Approvers(json.RawMessage(`{"i":3}`), got.Approvals[0].At.Add(time.Second))); n != 0 {
		t.Fatalf("an expired approval counts (%d)", n)
	}
	if r := b.mustOK(t, ledger.Decide("g", "a3", short)); r.Action.Status != ledger.StatusPending {
		t.Fatalf("expired approval still approves: %+v", r.Action)
	}
}

// reopenGates: every gate field and approval survives a reopen.
func reopenGates(t *testing.T, b *bundle, open Opener, k1 string) {
	t.Helper()
	b.l.Close()
	l := open(t, b.cfg)
	rows, err := l.Actions(b.ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if rows[1].Gate == nil || rows[1].Gate.Rule != "four-eyes" || len(rows[0].Approvals) != 2 || rows[0].Approvals[0].Used != k1 {
		t.Fatalf("after reopen: %+v", rows[:2])
	}
	if run, _ := l.GetRun(b.ctx, "g"); run.CreatedBy != "token:alice" {
		t.Fatalf("creator after reopen: %+v", run)
	}
}

// testGateGroups:// testGateGroups: a gate that names groups admits an approver by the groups
// its approval carries (ApproveAs), refuses one without them with a message
// naming the group, records the groups with the approval and in the event,
// and keeps them across a reopen: the decision needs nothing but the ledger.
func testGateGroups(t *testing.T, open Opener, opts Options) {
	b := setup(t, open)
	if _, _, err := b.l.CreateRun(b.ctx, ledger.Run{ID: "gg", Policy: "safe", CreatedBy: "token:agent"}, testPlan("pay", 1), nil); err != nil {
		t.Fatal(err)
	}
	gate := ledger.Gate{Rule: "finance", Outcome: "approve", Need: 1, Groups: []string{"finance"}}
	if r := b.mustOK(t, ledger.Decide("gg", "a1", gate)); r.Action.Gate == nil || !slices.Equal(r.Action.Gate.Groups, []string{"finance"}) {
		t.Fatalf("after Decide: %+v", r.Action.Gate)
	}
	for _, who := range []ledger.Approver{{By: "token:eve"}, {By: "token:sam", Groups: []string{"sales"}}} {
		r := b.apply(t, ledger.ApproveAs("gg", "a1", nil, who))
		if !errors.Is(r.Err, ledger.ErrApproverRefused) || !strings.Contains(r.Err.Error(), "members of group finance") {
			t.Fatalf("%+v approved: %v", who, r.Err)
		}
	}
	if got := b.row(t, "gg", "a1"); got.Status != ledger.StatusPending || len(got.Approvals) != 0 {
		t.Fatalf("a refused approval was recorded: %+v", got)
	}
	r := b.mustOK(t, ledger.ApproveAs("gg", "a1", nil, ledger.Approver{By: "token:fred", Groups: []string{"ops", "finance"}}))
	if r.Action.Status != ledger.StatusApproved || len(r.Action.Approvals) != 1 || !slices.Equal(r.Action.Approvals[0].Groups, []string{"ops", "finance"}) {
		t.Fatalf("a member of finance: %+v", r.Action)
	}
	var ev struct {
		By     string   `json:"by"`
		Groups []string `json:"groups"`
	}
	evs := b.events(t, "gg")
	if last := evs[len(evs)-1]; last.Type != ledger.EventActionApproved || json.Unmarshal(last.Data, &ev) != nil || ev.By != "token:fred" || !slices.Equal(ev.Groups, []string{"ops", "finance"}) {
		t.Fatalf("approved event %s %s", last.Type, last.Data)
	}
	if c := b.row(t, "gg", "a1").Counting(json.RawMessage(`{"i":1}`), time.Now()); len(c) != 1 || !slices.Equal(c[0].Groups, []string{"ops", "finance"}) {
		t.Fatalf("counting approvals %+v", c)
	}
	if opts.Durable {
		reopenGateGroups(t, b, open)
	}
}

// reopenGateGroups: the gate's groups and the approval's survive a reopen,
// and the decision needs nothing but the ledger.
func reopenGateGroups(t *testing.T, b *bundle, open Opener) {
	t.Helper()
	b.l.Close()
	l := open(t, b.cfg)
	rows, err := l.Actions(b.ctx, "gg")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows[0].Gate.Groups, []string{"finance"}) || !slices.Equal(rows[0].Approvals[0].Groups, []string{"ops", "finance"}) {
		t.Fatalf("after reopen: gate %+v approvals %+v", rows[0].Gate, rows[0].Approvals)
	}
	if ok, why := rows[0].Gate.MayApprove("token:eve", nil, "token:agent"); ok || !strings.Contains(why, "members of group finance") {
		t.Fatalf("after reopen, eve: %v %q", ok, why)
	}
}
