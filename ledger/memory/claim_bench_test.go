package memory_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/ledger/memory"
	"github.com/docketrun/docket/plan"
)

// BenchmarkClaim measures one first claim through the memory store (no
// disk), so that what the claim's own checks cost shows: "plain" claims as
// callers did before the ledger re-checked what a claim was decided from,
// "decided" states the args read and an allow gate (Op.Decided), "approved"
// has a gate needing one approval of exactly the args sent, "uncounted"
// names 16 siblings left out of the run's totals (Op.Uncounted). Runs of
// 256 actions each.
//
//	go test -run '^$' -bench Claim -count 5 ./ledger/memory/
func BenchmarkClaim(b *testing.B) {
	for _, mode := range []string{"plain", "decided", "approved", "uncounted"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			l, err := memory.New(memory.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			const siblings, perRun = 16, 256
			need := ledger.Gate{Rule: "one", Outcome: "approve", Need: 1}
			ops := make([]ledger.Op, b.N)
			for i := range ops {
				run, n := fmt.Sprintf("r%d", i/perRun), i%perRun
				if n == 0 {
					p := &plan.Plan{Goal: "bench"}
					for j := 0; j < perRun+siblings; j++ {
						p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", j), Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, j))})
					}
					if _, _, err := l.CreateRun(ctx, ledger.Run{ID: run, Policy: "safe"}, p, nil); err != nil {
						b.Fatal(err)
					}
				}
				var uncounted []string
				for j := perRun; j < perRun+siblings; j++ {
					uncounted = append(uncounted, fmt.Sprintf("a%d", j))
				}
				id, args := fmt.Sprintf("a%d", n), json.RawMessage(fmt.Sprintf(`{"i":%d}`, n))
				k, err := plan.Key(run, id, "t", args)
				if err != nil {
					b.Fatal(err)
				}
				o := ledger.Claim(run, id, "t", k, args, 1)
				switch mode {
				case "decided":
					o = o.Decided(args, ledger.Gate{Outcome: "allow"}, false)
				case "approved":
					if _, err := l.Apply(ctx, ledger.Decide(run, id, need), ledger.Approve(run, id, nil, "token:bob")); err != nil {
						b.Fatal(err)
					}
					o = o.Decided(args, need, false)
				case "uncounted":
					o = o.Decided(args, ledger.Gate{Outcome: "allow"}, false).Uncounted(uncounted...)
				}
				ops[i] = o
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if r, err := ledger.ApplyOne(ctx, l, ops[i]); err != nil || r.Err != nil {
					b.Fatal(err, r.Err)
				}
			}
		})
	}
}

// BenchmarkClaimLimits: a call's claim and outcome without and with tool
// limits (ledgertest.BenchClaimLimits).
//
//	go test -run '^$' -bench ClaimLimits -count 5 ./ledger/memory/
func BenchmarkClaimLimits(b *testing.B) {
	l, err := memory.New(memory.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ledgertest.BenchClaimLimits(b, l)
}
