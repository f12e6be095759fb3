package ledgertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/plan"
)

// BenchClaimLimits measures a call's two commits on l, its claim and its
// outcome (Apply(Claim), then Apply(Succeed)), one action after another:
// "none" without tool limits, "max_in_flight" with a max_in_flight of 8
// (the claim takes a slot, the outcome gives it back), "rate" with a rate
// of 1000 per second as well (the claim also keeps its start in a list of
// up to 1000; a claim refused because the rate is spent waits 1ms off the
// clock and is tried again, its refusal counted in the time). Runs of 256
// actions each.
func BenchClaimLimits(b *testing.B, l ledger.Store) {
	for _, mode := range []string{"none", "max_in_flight", "rate"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			var lim ledger.ToolLimit
			switch mode {
			case "max_in_flight":
				lim = ledger.ToolLimit{MaxInFlight: 8}
			case "rate":
				// 1000 per second: the claim reads and writes a list of up to
				// 1000 recent starts, the most a rate keeps.
				lim = ledger.ToolLimit{MaxInFlight: 8, Rate: 1000, Per: time.Second}
			}
			const perRun = 256
			type call struct {
				claim ledger.Op
				key   string
			}
			calls := make([]call, b.N)
			stamp := time.Now().UnixNano() // -count runs again on the same store
			for i := range calls {
				run, n := fmt.Sprintf("bench-%s-%d-%d", mode, stamp, i/perRun), i%perRun
				if n == 0 {
					p := &plan.Plan{Goal: "bench"}
					for j := range perRun {
						p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", j), Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, j))})
					}
					if _, _, err := l.CreateRun(ctx, ledger.Run{ID: run, Policy: "safe"}, p, nil); err != nil {
						b.Fatal(err)
					}
				}
				id, args := fmt.Sprintf("a%d", n), json.RawMessage(fmt.Sprintf(`{"i":%d}`, n))
				k, err := plan.Key(run, id, "t", args)
				if err != nil {
					b.Fatal(err)
				}
				calls[i] = call{claim: ledger.Claim(run, id, "t", k, args, 1).WithLimits(lim), key: k}
			}
			out := json.RawMessage(`{"ok":true}`)
			b.ResetTimer()
			for _, c := range calls {
				for {
					r, err := ledger.ApplyOne(ctx, l, c.claim)
					if errors.Is(err, ledger.ErrLimited) || errors.Is(r.Err, ledger.ErrLimited) {
						// The rate is spent: a start leaves the window soon. The
						// wait is not the claim's cost.
						b.StopTimer()
						time.Sleep(time.Millisecond)
						b.StartTimer()
						continue
					}
					if err != nil || r.Err != nil {
						b.Fatal(err, r.Err)
					}
					break
				}
				if r, err := ledger.ApplyOne(ctx, l, ledger.Succeed(c.key, 1, out)); err != nil || r.Err != nil {
					b.Fatal(err, r.Err)
				}
			}
		})
	}
}
