package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// TestCrashAtEveryHookPointTakesEffectOnce crashes (closes the ledger, as a
// dying process leaves it) at the k-th hook point of a run, for every k,
// reopens with a new incarnation, resumes, and checks that every key took
// effect exactly once.
func TestCrashAtEveryHookPointTakesEffectOnce(t *testing.T) {
	t.Parallel()
	for k := 1; ; k++ {
		var points atomic.Int32
		var crashed atomic.Bool
		var b *bundle
		crashAt := func(string) {
			if int(points.Add(1)) == k && crashed.CompareAndSwap(false, true) {
				b.led.Close()
			}
		}
		w := tooltest.NewWorld()
		ts := []tools.Tool{w.Tool(spec("create", tools.Lookup)), w.Tool(spec("charge", tools.Keyed)), w.Tool(spec("set", tools.Idempotent))}
		b = setup(t, ts, func(c *Config) {
			c.Hooks = Hooks{BeforeClaim: crashAt, AfterClaim: crashAt, AfterCall: crashAt, AfterOutcome: crashAt}
			c.Parallelism = 1 // a deterministic order of hook points
		})
		p := mkPlan(t,
			pa("a", "create", `{"name":"x"}`),
			pa("b", "charge", `{"customer":"${a.output.id}"}`, "a"),
			pa("c", "set", `{"v":"${b.output.id}"}`, "b"),
			pa("d", "create", `{"name":"y"}`))
		_, err := b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll})
		if !crashed.Load() {
			if err != nil {
				t.Fatalf("k=%d: Run without a crash: %v", k, err)
			}
			if k < 8 {
				t.Fatalf("only %d hook points", k-1)
			}
			return // every crash point is covered
		}
		runErr := err
		b.restart()
		var doc ledger.RunDoc
		if _, err := b.led.GetRun(context.Background(), "r1"); errors.Is(err, ledger.ErrNotFound) {
			// Killed before the commit that records the run with its first
			// claim: nothing was written, so the caller runs it again.
			if k != 1 {
				t.Fatalf("k=%d: the run was not recorded", k)
			}
			// The failed record says so once, with the ledger's error.
			if !errors.Is(runErr, ledger.ErrClosed) || strings.Count(runErr.Error(), "executor: run r1") != 1 || !strings.Contains(runErr.Error(), "record run") {
				t.Fatalf("k=%d: Run's error when the ledger closed before the run was recorded: %v", k, runErr)
			}
			if doc, err = b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll}); err != nil {
				t.Fatalf("k=%d: Run again: %v", k, err)
			}
		} else {
			doc = b.resume("r1")
		}
		if doc.Run.Status != ledger.RunCompleted {
			t.Fatalf("k=%d: after resume: %s %s", k, doc.Run.Status, docString(doc))
		}
		for _, a := range doc.Actions {
			if n := w.Effects(a.Key); n != 1 {
				t.Fatalf("k=%d: action %s took effect %d times", k, a.ID, n)
			}
		}
		if d := w.Duplicates(); len(d) > 0 {
			t.Fatalf("k=%d: duplicates %v", k, d)
		}
		if got := fmt.Sprint(len(w.Keys())); got != "4" {
			t.Fatalf("k=%d: %s keys took effect", k, got)
		}
	}
}
