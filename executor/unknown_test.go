package executor

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// TestUnknownOutcomeIsNotSkippedWhenTheRunFails is the executor-level
// reproduction of the chaos harness's lost effects (seed 20261130, runs 232
// and 317): action a's call commits but its answer is lost (outcome unknown);
// before a's retry, b is declined and fails the run. a was sent: it must be
// brought to a conclusion (retried: it succeeded) and compensated, never
// skipped as "not started". restart: the process dies right after a's
// unknown outcome was recorded, and the next process finds b failed.
func TestUnknownOutcomeIsNotSkippedWhenTheRunFails(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		name := "in_process"
		if restart {
			name = "restart_before_retry"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			w.FaultFunc = func(tool string, c tools.Call, n int) tooltest.Fault {
				switch {
				case tool == "create" && n == 1:
					return tooltest.LoseReply
				case tool == "charge":
					return tooltest.Reject
				}
				return tooltest.NoFault
			}
			create := spec("create", tools.Keyed)
			create.Compensate = &tools.Compensation{Tool: "delete", Args: json.RawMessage(`{"id":"${output.id}"}`)}
			ts := []tools.Tool{w.Tool(create), w.Tool(spec("charge", tools.Keyed)), w.Tool(spec("delete", tools.Idempotent))}
			bFailed := make(chan struct{})
			var once sync.Once
			var crashed atomic.Bool
			var b *bundle
			b = setup(t, ts, func(c *Config) {
				c.Parallelism = 2
				c.Hooks.AfterCall = func(id string) {
					if id != "a" {
						return
					}
					select { // a's outcome is decided only after b failed
					case <-bFailed:
					case <-time.After(2 * time.Minute):
						t.Error("b's failure was never recorded")
					}
				}
				c.Hooks.AfterOutcome = func(id string) {
					switch id {
					case "b":
						once.Do(func() { close(bFailed) })
					case "a":
						if restart && crashed.CompareAndSwap(false, true) {
							b.led.Close() // a's unknown outcome is recorded; its retry never starts
						}
					}
				}
			})
			p := mkPlan(t, pa("a", "create", `{"name":"x"}`), pa("b", "charge", `{"amount":5}`))
			var doc ledger.RunDoc
			if restart {
				if _, err := b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll}); err == nil {
					t.Fatal("Run survived the crash")
				}
				if !crashed.Load() {
					t.Fatal("no crash after a's unknown outcome")
				}
				b.restart()
				doc = b.resume("r1")
			} else {
				doc = b.run("r1", p, PolicyAll)
			}
			wantStatus(t, doc, ledger.RunFailed)
			wantAction(t, doc, "b", ledger.StatusFailed)
			a := row(t, doc, "a")
			if a.Status == ledger.StatusSkipped {
				t.Fatalf("a was sent (its effect exists: %d) but is marked skipped: %q", w.Effects(a.Key), a.Error)
			}
			wantAction(t, doc, "a", ledger.StatusCompensated)
			if n := w.Effects(a.Key); n != 1 {
				t.Fatalf("a took effect %d times", n)
			}
			u := wantAction(t, doc, "a.undo", ledger.StatusSucceeded)
			if n := w.Effects(u.Key); n != 1 {
				t.Fatalf("a.undo took effect %d times", n)
			}
			for _, ev := range b.events("r1") {
				if ev.Type == "action.skipped" && ev.ActionID == "a" {
					t.Fatalf("event %s for a: %s", ev.Type, ev.Data)
				}
			}
		})
	}
}
