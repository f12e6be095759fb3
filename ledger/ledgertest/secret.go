package ledgertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// RecordSecret records run runID on l with secret in its goal, plan, args,
// an output, an error, its events and a memo, and one argument of pad
// bytes beside it (past a backend's inline size: Badger's value log, a
// blob), so that tests of encryption at rest can look for secret in what
// the backend stored.
func RecordSecret(t testing.TB, l ledger.Store, runID, secret string, pad int) {
	t.Helper()
	ctx := context.Background()
	big := strings.Repeat("y", pad)
	p := &plan.Plan{Goal: "pay with " + secret, Actions: []plan.Action{
		{ID: "a0", Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"token":%q}`, secret))},
		{ID: "a1", Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"token":%q,"big":%q}`, secret, big))},
	}}
	if _, _, err := l.CreateRun(ctx, ledger.Run{ID: runID, Goal: p.Goal, Policy: "all"}, p, nil); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	for i, a := range p.Actions {
		k, err := plan.Key(runID, a.ID, a.Tool, a.Args)
		if err != nil {
			t.Fatal(err)
		}
		ops := []ledger.Op{ledger.Claim(runID, a.ID, a.Tool, k, a.Args, 1)}
		if i == 0 {
			ops = append(ops, ledger.Succeed(k, 1, json.RawMessage(fmt.Sprintf(`{"echo":%q}`, secret))))
		} else {
			ops = append(ops, ledger.Fail(k, 1, "upstream said "+secret, false, nil))
		}
		for _, op := range ops {
			res, err := l.Apply(ctx, op)
			if err == nil && res[0].Err != nil {
				err = res[0].Err
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
		}
	}
	if _, err := l.Memo(ctx, runID, "m", json.RawMessage(fmt.Sprintf(`{"s":%q}`, secret))); err != nil {
		t.Fatal(err)
	}
}
