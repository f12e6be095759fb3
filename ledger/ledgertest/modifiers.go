package ledgertest

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/docketrun/docket/ledger"
)

// testModifiers: an op's modifiers (Decided, Parking, Uncounted,
// WithCharges, NoEffect) return a new op and leave the one they were
// called on as it was; on an op of a kind that does not take them the op
// is ErrInvalid and writes nothing.
func testModifiers(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "m", 3)
	b.mustOK(t, ledger.SetPause("m", "token:bob", "", nil))
	args := json.RawMessage(`{"i":1}`)
	base := ledger.Claim("m", "a1", "t", key(t, "m", "a1", `{"i":1}`), args, 1)
	parked := base.Parking()
	if r := b.apply(t, base); !errors.Is(r.Err, ledger.ErrStale) {
		t.Fatalf("the claim Parking was called on, while paused: %v; want ErrStale (it must not park)", r.Err)
	}
	decided := parked.Decided(args, ledger.Gate{Outcome: "allow"}, false)
	b.mustOK(t, decided) // parks: Decided kept Parking

	before := len(b.events(t, "m"))
	for name, op := range map[string]ledger.Op{
		"Decided on Approve":  ledger.Approve("m", "a2", nil, "token:bob").Decided(nil, ledger.Gate{}, false),
		"Parking on Reject":   ledger.Reject("m", "a2", "no", "token:bob").Parking(),
		"Uncounted on Skip":   ledger.Skip("m", "a2", "x").Uncounted("a3"),
		"WithCharges on Edit": ledger.Edit("m", "a2", json.RawMessage(`{"i":9}`), "token:bob").WithCharges(ledger.Charge{Budget: "b", Scope: "s", Amount: "1", Limit: "2"}),
		"NoEffect on Claim":   ledger.Claim("m", "a2", "t", key(t, "m", "a2", `{"i":2}`), json.RawMessage(`{"i":2}`), 1).NoEffect(),
		"NoEffect on Reject":  ledger.Reject("m", "a2", "no", "token:bob").NoEffect(),
	} {
		if r := b.apply(t, op); !errors.Is(r.Err, ledger.ErrInvalid) {
			t.Errorf("%s: %v; want ErrInvalid", name, r.Err)
		}
	}
	if n := len(b.events(t, "m")); n != before {
		t.Fatalf("invalid ops appended %d events", n-before)
	}
	acts, err := b.l.Actions(b.ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if a := acts[1]; a.Status != ledger.StatusPending || string(a.Args) != `{"i":2}` {
		t.Fatalf("a2 after invalid ops: %s %s; want pending with its planned args", a.Status, a.Args)
	}
}
