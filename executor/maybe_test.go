package executor

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/tooltest"
)

// TestNotSentRetriesAfterUnknownEndInReview: attempt 1 of a keyed charge
// commits but its answer is lost (outcome unknown); every later attempt fails
// before it is sent. Running out of retries then must not record "failed"
// (nothing to compensate, the effect "did not happen"): the effect of attempt
// 1 may exist, so a person decides (needs_review). restart: the process dies
// right after attempt 1's unknown outcome was recorded, and the next one
// inherits it from the record.
func TestNotSentRetriesAfterUnknownEndInReview(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		name := "in_process"
		if restart {
			name = "restart_after_unknown"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := tooltest.NewWorld()
			w.FaultFunc = func(tool string, c tools.Call, n int) tooltest.Fault {
				if n == 1 {
					return tooltest.LoseReply
				}
				return tooltest.FailNotSent
			}
			var b *bundle
			var crashed atomic.Bool
			b = setup(t, []tools.Tool{w.Tool(spec("charge", tools.Keyed))}, func(c *Config) {
				if restart {
					c.Hooks.AfterOutcome = func(string) {
						if crashed.CompareAndSwap(false, true) {
							b.led.Close()
						}
					}
				}
			})
			p := mkPlan(t, pa("a", "charge", `{"amount":5}`))
			var doc ledger.RunDoc
			if restart {
				if _, err := b.eng.Run(context.Background(), "r1", p, &RunOptions{Policy: PolicyAll}); err == nil {
					t.Fatal("Run survived the crash")
				}
				b.restart()
				doc = b.resume("r1")
			} else {
				doc = b.run("r1", p, PolicyAll)
			}
			a := row(t, doc, "a")
			if n := w.Effects(a.Key); n != 1 {
				t.Fatalf("%d effects, want 1 (from attempt 1)", n)
			}
			if a.Status != ledger.StatusNeedsReview {
				t.Fatalf("action a is %s (%q), want needs_review: attempt 1 may have taken effect", a.Status, a.Error)
			}
			wantStatus(t, doc, ledger.RunPaused)
		})
	}
}
