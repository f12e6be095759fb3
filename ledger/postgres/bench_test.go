package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// BenchmarkStep measures one step as the executor records it on the shared
// ledger: a claim then its outcome, two durable commits, on a run of its
// own per worker, against the throwaway cluster (fsync and
// synchronous_commit on). Sequential (1 in flight) and 64 in flight; it
// reports steps/s and the p50/p99 latency of one step.
//
//	go test ./ledger/postgres -run '^$' -bench Step -benchtime 2000x
func BenchmarkStep(b *testing.B) {
	for _, inflight := range []int{1, 64} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			s := open(b, postgres.Config{Schema: schemaFor(fmt.Sprintf("%s-%d", b.Name(), b.N)), MaxConns: max(8, inflight)})
			benchSteps(b, s, inflight)
		})
	}
}

// benchSteps runs b.N steps (a claim, then its success, each one Apply) on
// s, inflight at a time, one run per worker, and reports steps/s and the
// p50 and p99 latency of a step.
func benchSteps(b *testing.B, s *postgres.Store, inflight int) {
	ctx := context.Background()
	per := (b.N + inflight - 1) / inflight
	for w := range inflight {
		p := &plan.Plan{Goal: "bench"}
		for i := range per {
			p.Actions = append(p.Actions, plan.Action{ID: fmt.Sprintf("a%d", i), Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		}
		if _, _, err := s.CreateRun(ctx, ledger.Run{ID: fmt.Sprintf("w%d", w), Policy: "all"}, p, nil); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([][]time.Duration, inflight)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range inflight {
		n := min(per, b.N-per*w)
		wg.Go(func() {
			run := fmt.Sprintf("w%d", w)
			for i := range max(n, 0) {
				id := fmt.Sprintf("a%d", i)
				args := json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
				k, _ := plan.Key(run, id, "t", args)
				t0 := time.Now()
				if _, err := ledger.ApplyOne(ctx, s, ledger.Claim(run, id, "t", k, args, 1)); err != nil {
					b.Error(err)
					return
				}
				if _, err := ledger.ApplyOne(ctx, s, ledger.Succeed(k, 1, json.RawMessage(`{"ok":true}`))); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "steps/s")
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(all[min(len(all)-1, len(all)*99/100)].Microseconds())/1000, "p99_ms")
	}
}

// BenchmarkClaimLimits: a call's claim and outcome, two durable commits,
// without and with tool limits (ledgertest.BenchClaimLimits), against the
// throwaway cluster.
//
//	go test ./ledger/postgres -run '^$' -bench ClaimLimits -benchtime 2000x
func BenchmarkClaimLimits(b *testing.B) {
	s := open(b, postgres.Config{Schema: schemaFor(fmt.Sprintf("%s-%d", b.Name(), b.N))})
	ledgertest.BenchClaimLimits(b, s)
}
