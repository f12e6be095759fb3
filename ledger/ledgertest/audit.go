package ledgertest

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/docketrun/docket/ledger"
)

// testAudit: every event of a run carries a hash chaining it to the one
// before (ledger.ChainHash), the run's AuditHash is the last one's, and
// VerifyChain finds an edited, removed, reordered or cut-off event. A store
// whose events carry no hash (its Tx does not implement
// ledger.HashedAppender) is skipped.
func testAudit(t *testing.T, open Opener) {
	b := setup(t, open)
	b.createRun(t, "au", 2)
	k := key(t, "au", "a1", `{"i":1}`)
	b.mustOK(t, ledger.Claim("au", "a1", "t", k, json.RawMessage(`{"i":1}`), 1))
	b.mustOK(t, ledger.Succeed(k, 1, json.RawMessage(`{"ok":true}`)))
	b.mustOK(t, ledger.Note("au", "run.note", "", json.RawMessage(`{"x":1}`)))
	evs := b.events(t, "au")
	run, err := b.l.GetRun(b.ctx, "au")
	if err != nil {
		t.Fatal(err)
	}
	if evs[0].Hash == "" {
		t.Skip("the store does not chain events (no ledger.HashedAppender)")
	}
	for _, ev := range evs {
		if ev.Hash == "" {
			t.Fatalf("event %d has no hash", ev.Seq)
		}
	}
	if run.AuditHash != evs[len(evs)-1].Hash {
		t.Fatalf("run's AuditHash %s, last event's %s", run.AuditHash, evs[len(evs)-1].Hash)
	}
	if chained, err := ledger.VerifyChain("au", evs, run.AuditHash); err != nil || !chained {
		t.Fatalf("VerifyChain = %v, %v", chained, err)
	}
	broken := func(name string, evs []ledger.Event, at uint64) {
		t.Helper()
		_, err := ledger.VerifyChain("au", evs, run.AuditHash)
		var ce *ledger.ChainError
		if !errors.As(err, &ce) || ce.Seq != at {
			t.Errorf("%s: got %v, want a break at %d", name, err, at)
		}
	}
	edited := slices.Clone(evs)
	edited[3].Data = json.RawMessage(`{"output":{"ok":false}}`)
	broken("edited data", edited, 4)
	retyped := slices.Clone(evs)
	retyped[1].Type = "run.completed"
	broken("edited type", retyped, 2)
	broken("cut off", evs[:len(evs)-1], uint64(len(evs)))
	dropped := append(slices.Clone(evs[:2]), evs[3:]...)
	broken("removed", dropped, 3)
	swapped := slices.Clone(evs)
	swapped[2], swapped[3] = swapped[3], swapped[2]
	swapped[2].Seq, swapped[3].Seq = 3, 4
	broken("reordered", swapped, 3)
}
