package executor

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// A drive's workers wait for its next act between calls and end with the
// drive: after runs of a chain, a fan with a join, and a diamond, every
// outcome is recorded and no goroutine of theirs is left. Not parallel, so
// that no other test's goroutines come and go meanwhile.
func TestDriveLeavesNoWorkers(t *testing.T) {
	world := tooltest.NewWorld()
	b := setup(t, []tools.Tool{world.Tool(spec("mk", tools.Keyed))}, func(c *Config) { c.Parallelism = 4 })
	opts := goleak.IgnoreCurrent()
	plans := map[string][]plan.Action{
		"chain": {pa("a", "mk", `{"i":1}`), pa("b", "mk", `{"i":2}`, "a"), pa("c", "mk", `{"i":3}`, "b")},
		"fan": {pa("a", "mk", `{"i":1}`), pa("b", "mk", `{"i":2}`, "a"), pa("c", "mk", `{"i":3}`, "a"),
			pa("d", "mk", `{"i":4}`, "a"), pa("e", "mk", `{"i":5}`, "a"), pa("j", "mk", `{"i":6}`, "b", "c", "d", "e")},
		"diamond": {pa("a", "mk", `{"i":1}`), pa("b", "mk", `{"i":2}`, "a"), pa("c", "mk", `{"i":3}`, "a"), pa("d", "mk", `{"i":4}`, "b", "c")},
	}
	for name, acts := range plans {
		p := mkPlan(t, acts...)
		doc, err := b.eng.Run(context.Background(), name, p, &RunOptions{Policy: PolicyAll})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wantStatus(t, doc, ledger.RunCompleted)
		for _, r := range doc.Actions {
			if r.Status != ledger.StatusSucceeded {
				t.Fatalf("%s: action %s is %s", name, r.ID, r.Status)
			}
		}
	}
	// The ledger starts a writer goroutine of its own when its commits
	// need one; it ends when the ledger closes.
	goleak.VerifyNone(t, opts, goleak.IgnoreTopFunction("github.com/docketrun/docket/ledger/badgerdb.(*Ledger).writer"))
}
